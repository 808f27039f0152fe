package networking

import (
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// Rules returns the networking monitor's log rules: transmit timeouts and
// driver resets of the NICs nodes commonly have. Formats are those of the
// kernel source files named in each comment (Linux 4.14 through 6.x). The
// drivers print through netdev_*() ("DRIVER BUS-ID IFNAME: ...", or "IFNAME:
// ..." for a device without a parent) or dev_*() ("DRIVER BUS-ID: ...").
func Rules() []logline.Rule {
	kmsg := []logline.Source{logline.Kmsg}
	kernel := []logline.Provenance{logline.ByKernel}
	return []logline.Rule{
		// --- NICTransmitTimeout ----------------------------------------------
		// The kernel's netdev watchdog found a stopped transmit queue that made
		// no progress for the device's watchdog_timeo; it then calls the
		// driver's ndo_tx_timeout, which usually resets the device.
		//
		// net/sched/sch_generic.c dev_watchdog(), up to 6.7 a WARN_ONCE:
		//   "NETDEV WATCHDOG: eth0 (ena): transmit queue 3 timed out"
		// 6.3-6.7 append " NNNN ms".
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
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
			Accept:   kernel,
			Contains: []string{"NETDEV WATCHDOG: CPU: ", " timed out"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): NETDEV WATCHDOG: CPU: \d+: transmit queue (?P<queue>\d+) timed out`,
			Message:  "${dev} (${driver}): transmit queue ${queue} timed out; the driver resets the device",
		},
		// ... and without the driver for a device that has no parent (a
		// virtual device): "bond0: NETDEV WATCHDOG: CPU: 1: transmit queue 0 timed out 5004 ms"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"NETDEV WATCHDOG: CPU: ", " timed out"},
			Pattern:  `^(?P<dev>[^\s:]+)(?: \([a-z ]+\))?: NETDEV WATCHDOG: CPU: \d+: transmit queue (?P<queue>\d+) timed out`,
			Message:  "${dev}: transmit queue ${queue} timed out; the driver resets the device",
		},
		// drivers/net/ethernet/amazon/ena/ena_netdev.c ena_tx_timeout(), the
		// driver's watchdog handler, netif_err() before 6.9:
		//   "ena 0000:00:05.0 eth0: Transmit time out"
		// and netdev_err() since:
		//   "ena 0000:00:05.0 eth0: TX q 3 is paused for too long (threshold 5000000). Time since last napi 5004000 usec. napi scheduled: 1"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Transmit time out"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Transmit time out`,
			Message:  "${dev} (ENA): transmit queue timed out; the driver resets the device",
		},
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" is paused for too long"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): TX q (?P<queue>\d+) is paused for too long`,
			Message:  "${dev} (ENA): transmit queue ${queue} timed out; the driver resets the device",
		},
		// ena_netdev.c check_missing_comp_in_tx_queue(): a packet handed to the
		// device got no completion within the missing-completion timeout,
		// netif_notice(), once per packet:
		//   "ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time, qid 2, index 219. 5004 usecs have passed since last napi execution. Napi scheduled: 0"
		// 6.9+: "ena 0000:00:05.0 eth0: TX hasn't completed, qid 2, index 219. 5004 usecs from last napi execution, napi scheduled: 0"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Found a Tx that wasn't completed on time, qid "},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Found a Tx that wasn't completed on time, qid (?P<queue>\d+)`,
			Message:  "${dev} (ENA): transmit queue ${queue} has packets the device did not complete in time",
		},
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"TX hasn't completed, qid "},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): TX hasn't completed, qid (?P<queue>\d+)`,
			Message:  "${dev} (ENA): transmit queue ${queue} has packets the device did not complete in time",
		},
		// drivers/net/ethernet/mellanox/mlx5/core/en/reporter_tx.c
		// mlx5e_reporter_tx_timeout() (en_main.c mlx5e_tx_timeout() before
		// 5.3, without "usecs since last trans"), printed by netdev_err():
		//   "mlx5_core 0000:3b:00.0 ens1f0np0: TX timeout on queue: 3, SQ: 0x10c, CQ: 0x4f, SQ Cons: 0x0 SQ Prod: 0x1, usecs since last trans: 16732000"
		// drivers/net/virtio_net.c virtnet_tx_timeout():
		//   "virtio_net virtio0 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 5004000 usecs ago"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"TX timeout on queue: "},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): TX timeout on queue: (?P<queue>\d+)`,
			Message:  "${dev} (${driver}): transmit queue ${queue} timed out; the driver recovers the queue",
		},
		// drivers/net/ethernet/intel/i40e/i40e_main.c i40e_tx_timeout() and
		// ice/ice_main.c ice_tx_timeout(), netdev_info():
		//   "i40e 0000:3b:00.0 ens1f0: tx_timeout: VSI_seid: 390, Q 5, NTC: 0x1a4, HWB: 0x1a4, NTU: 0x1b2, TAIL: 0x1b2, INT: 0x1"
		//   "ice 0000:17:00.0 ens2f0: tx_timeout: VSI_num: 6, Q 12, NTC: 0x0, HW_HEAD: 0x0, NTU: 0x3, INT: 0x0"
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"tx_timeout: VSI_"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): tx_timeout: VSI_(?:seid|num): \d+, Q (?P<queue>\d+)`,
			Message:  "${dev} (${driver}): transmit queue ${queue} timed out; the driver resets the device",
		},
		// drivers/net/ethernet/intel/ixgbe/ixgbe_main.c ixgbe_clean_tx_irq(),
		// the driver's own hang detection, e_err() (netif_err) with the ring's
		// registers on the following lines:
		//   "ixgbe 0000:01:00.0 eth0: Detected Tx Unit Hang \n  Tx Queue             <4>\n ..."
		// e1000e prints "Detected Hardware Unit Hang:" the same way; igb and
		// igc print through dev_err() without the interface:
		//   "igb 0000:03:00.0: Detected Tx Unit Hang\n  Tx Queue             <0>\n ..."
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" Unit Hang"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): Detected (?:Tx|Hardware) Unit Hang`,
			Message:  "${dev} (${driver}): the driver detected a transmit unit hang and resets the adapter",
		},
		{
			Reason:   health.ReasonNICTransmitTimeout,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" Unit Hang"},
			Pattern:  `^(?P<driver>\S+) (?P<dev>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): Detected Tx Unit Hang`,
			Message:  "${driver} device ${dev}: the driver detected a transmit unit hang and resets the adapter",
		},

		// --- NICDriverReset --------------------------------------------------
		// drivers/net/ethernet/amazon/ena/ena_netdev.c. The timer service
		// notices a reset request (keep-alive or admin queue lost, missing TX
		// completions, a watchdog timeout) and logs, netif_err():
		//   "ena 0000:00:05.0 eth0: Trigger reset is on"
		// the reset itself ends in ena_restore_device(), dev_err() with the PCI
		// device (" Driver info: ..." since 4.19):
		//   "ena 0000:00:06.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.8.0g"
		//   "ena 0000:00:06.0: Reset attempt failed. Can not reset the device"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Device reset completed successfully"},
			Pattern:  `^(?P<driver>ena) (?P<dev>\S+): Device reset completed successfully`,
			Message:  "ENA device ${dev} was reset by its driver",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Reset attempt failed. Can not reset the device"},
			Pattern:  `^(?P<driver>ena) (?P<dev>\S+): Reset attempt failed`,
			Message:  "ENA device ${dev}: the driver's reset failed; the interface stays down",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Trigger reset is on"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Trigger reset is on`,
			Message:  "ENA device ${dev} is being reset by its driver",
		},
		// check_for_missing_keep_alive(), netif_err():
		//   "ena 0000:00:05.0 eth0: Keep alive watchdog timeout."
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Keep alive watchdog timeout"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Keep alive watchdog timeout`,
			Message:  "ENA device ${dev} missed its keep-alive; the driver resets it",
		},
		// check_for_admin_com_state(), netif_err():
		//   "ena 0000:00:05.0 eth0: ENA admin queue is not in running state!"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"ENA admin queue is not in running state"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): ENA admin queue is not in running state`,
			Message:  "ENA device ${dev} lost its admin queue; the driver resets it",
		},
		// check_missing_comp_in_tx_queue(), netif_err(), before and since 6.9:
		//   "ena 0000:00:05.0 eth0: The number of lost tx completions is above the threshold (129 > 128). Reset the device"
		//   "ena 0000:00:05.0 eth0: Lost TX completions are above the threshold (129 > 128). Completion transmission timeout: 5000."
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" tx completions is above the threshold"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): The number of lost tx completions is above the threshold \((?P<lost>\d+) > \d+\)`,
			Message:  "ENA device ${dev} lost ${lost} transmit completions; the driver resets it",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"Lost TX completions are above the threshold"},
			Pattern:  `^(?P<driver>ena) \S+ (?P<dev>[^\s:]+): Lost TX completions are above the threshold \((?P<lost>\d+) > \d+\)`,
			Message:  "ENA device ${dev} lost ${lost} transmit completions; the driver resets it",
		},
		// Intel i40e/ice tx_timeout handlers escalate a repeated timeout: level
		// 1 is a PF reset, 2 a core reset, 3 a global reset, netdev_info():
		//   "i40e 0000:3b:00.0 ens1f0: tx_timeout recovery level 1, txqueue 5"
		// (before 5.6 "..., hung_queue 5"). Past level 3, netdev_err():
		//   "i40e 0000:3b:00.0 ens1f0: tx_timeout recovery unsuccessful, device is in non-recoverable state."
		// (before 6.0 just "tx_timeout recovery unsuccessful").
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"tx_timeout recovery level "},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): tx_timeout recovery level (?P<level>\d+)`,
			Message:  "${dev} (${driver}): transmit timeout, driver recovery level ${level} (queue, PF or core reset)",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"tx_timeout recovery unsuccessful"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): tx_timeout recovery unsuccessful`,
			Message:  "${dev} (${driver}): every transmit-timeout recovery failed; the device is left down",
		},
		// drivers/net/ethernet/intel/ixgbe/ixgbe_main.c: the hang detection
		// above resets the adapter, e_info(); the watchdog handler
		// ixgbe_tx_timeout_reset(), e_warn(); ixgbe_reset_subtask(), netdev_err():
		//   "ixgbe 0000:01:00.0 eth0: tx hang 1 detected on queue 4, resetting adapter"
		//   "ixgbe 0000:01:00.0 eth0: initiating reset due to tx timeout"
		//   "ixgbe 0000:01:00.0 eth0: Reset adapter"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{" detected on queue ", ", resetting adapter"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): tx hang (?P<count>\d+) detected on queue (?P<queue>\d+), resetting adapter`,
			Message:  "${dev} (${driver}): transmit hang #${count} on queue ${queue}; the driver resets the adapter",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"initiating reset due to tx timeout"},
			Pattern:  `^(?P<driver>\S+) \S+ (?P<dev>[^\s:]+): initiating reset due to tx timeout`,
			Message:  "${dev} (${driver}): the driver resets the adapter after a transmit timeout",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{": Reset adapter"},
			Pattern:  `^(?P<driver>ixgbe(?:vf)?) \S+ (?P<dev>[^\s:]+): Reset adapter$`,
			Message:  "${dev} (${driver}): the driver resets the adapter",
		},
		// drivers/net/ethernet/mellanox/mlx5/core/health.c
		// mlx5_health_try_recover(): the firmware or PCI reported a fatal
		// error and the driver reloads the device, mlx5_core_err() (dev_err
		// with "function:line:(pid N): " since 5.x):
		//   "mlx5_core 0000:3b:00.0: mlx5_health_try_recover:340:(pid 1234): starting health recovery flow"
		//   "mlx5_core 0000:3b:00.0: mlx5_health_try_recover:346:(pid 1234): health recovery failed"
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"starting health recovery flow"},
			Pattern:  `^(?P<driver>mlx5_core\S*) (?P<dev>\S+?): (?:\S+:\d+:\(pid \d+\): )?starting health recovery flow`,
			Message:  "mlx5 device ${dev}: fatal device error, the driver reloads the device",
		},
		{
			Reason:   health.ReasonNICDriverReset,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"health recovery failed"},
			Pattern:  `^(?P<driver>mlx5_core\S*) (?P<dev>\S+?): (?:\S+:\d+:\(pid \d+\): )?health recovery failed`,
			Message:  "mlx5 device ${dev}: the driver could not recover the device; its interfaces stay down",
		},
	}
}

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor: each rule maps one to one to a
// finding about the device it names.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	return []detection.Finding{{
		Reason:   match.Reason,
		Message:  match.Message,
		Observed: match.Line.Time,
		Subject:  match.Groups["dev"],
	}}
}
