package networking

import (
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitor"
)

// Rules returns the networking monitor's log rules. Formats are those of
// the kernel source files named in each comment (Linux 4.14 through 6.x).
func Rules() []logline.Rule {
	kmsg := []logline.Source{logline.Kmsg}
	return []logline.Rule{
		// --- NICTransmitTimeout ----------------------------------------------
		// net/sched/sch_generic.c dev_watchdog(), up to 6.7 a WARN_ONCE:
		//   "NETDEV WATCHDOG: eth0 (ena): transmit queue 3 timed out"
		// 6.3-6.7 append " NNNN ms".
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Contains: []string{"NETDEV WATCHDOG: ", " timed out"},
			Pattern:  `NETDEV WATCHDOG: (?P<dev>[^\s:]+) \((?P<driver>[^)]*)\): transmit queue (?P<queue>\d+) timed out`,
			Message:  "${dev} (${driver}): transmit queue ${queue} timed out; the driver resets the device",
		},
		// 6.8+ prints through netdev_crit(), prefixed with the driver, bus
		// address and interface:
		//   "ena 0000:00:05.0 eth0: NETDEV WATCHDOG: CPU: 3: transmit queue 2 timed out 5120 ms"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Contains: []string{"NETDEV WATCHDOG: CPU: ", " timed out"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): NETDEV WATCHDOG: CPU: \d+: transmit queue (?P<queue>\d+) timed out`,
			Message:  "${dev} (${driver}): transmit queue ${queue} timed out; the driver resets the device",
		},

		// --- NICDriverReset --------------------------------------------------
		// drivers/net/ethernet/amazon/ena/ena_netdev.c ena_restore_device(),
		// dev_err() with the PCI device:
		//   "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.8.0g"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Contains: []string{"Device reset completed successfully"},
			Pattern:  `^(?P<driver>ena) (?P<dev>\S+): Device reset completed successfully`,
			Message:  "ENA device ${dev} was reset by its driver",
		},
		// ena_netdev.c check_for_missing_keep_alive(), netif_err():
		//   "ena 0000:00:05.0 eth0: Keep alive watchdog timeout."
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Contains: []string{"Keep alive watchdog timeout"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Keep alive watchdog timeout`,
			Message:  "ENA device ${dev} missed its keep-alive; the driver resets it",
		},
		// Intel i40e/ice/ixgbe tx_timeout handlers, netdev_info():
		//   "i40e 0000:3b:00.0 ens1f0: tx_timeout recovery level 1, txqueue 5"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Contains: []string{"tx_timeout recovery level "},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): tx_timeout recovery level (?P<level>\d+)`,
			Message:  "${dev} (${driver}): transmit timeout, driver recovery level ${level} (queue, PF or core reset)",
		},
	}
}

// Rules implements monitor.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements monitor.Monitor: each rule maps one to one to a
// finding about the device it names.
func (m *Monitor) Interpret(match logline.Match) []monitor.Finding {
	return []monitor.Finding{{
		Reason:   match.Reason,
		Message:  match.Message,
		Observed: match.Line.Time,
		Subject:  match.Groups["dev"],
	}}
}
