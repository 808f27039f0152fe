package networking

import (
	"context"
	"slices"
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

func kmsg(text string) logline.Line { return monitortest.Kernel(text, t0) }

type ruleCase struct {
	name string
	line logline.Line
	want []detection.Finding // nil: no match
}

func finding(reason, subject, msg string) []detection.Finding {
	return []detection.Finding{{Reason: reason, Subject: subject, Message: msg, Observed: t0}}
}

// Lines as the kernels named in rules.go print them (without the kmsg
// record prefix, which the kmsg source strips).
var ruleCases = []ruleCase{
	{
		name: "netdev watchdog, 5.x",
		line: kmsg("NETDEV WATCHDOG: eth0 (ena): transmit queue 3 timed out"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ena): transmit queue 3 timed out; the driver resets the device"),
	},
	{
		name: "netdev watchdog, 6.5 with duration",
		line: kmsg("NETDEV WATCHDOG: ens5 (ena): transmit queue 1 timed out 5376 ms"),
		want: finding(health.ReasonNICTransmitTimeout, "ens5", "ens5 (ena): transmit queue 1 timed out; the driver resets the device"),
	},
	{
		name: "netdev watchdog, 6.8+ netdev_crit",
		line: kmsg("ena 0000:00:05.0 eth0: NETDEV WATCHDOG: CPU: 3: transmit queue 2 timed out 5120 ms"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ena): transmit queue 2 timed out; the driver resets the device"),
	},
	{
		name: "netdev watchdog, virtio",
		line: kmsg("virtio_net virtio1 ens3: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 6012 ms"),
		want: finding(health.ReasonNICTransmitTimeout, "ens3", "ens3 (virtio_net): transmit queue 0 timed out; the driver resets the device"),
	},
	{
		name: "the WARN splat's module list is not another timeout",
		line: kmsg("Modules linked in: ena nf_conntrack xfs"),
	},
	{
		name: "ENA reset completed",
		line: kmsg("ena 0000:00:06.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.8.0g"),
		want: finding(health.ReasonNICDriverReset, "0000:00:06.0", "ENA device 0000:00:06.0 was reset by its driver"),
	},
	{
		name: "ENA keep-alive timeout",
		line: kmsg("ena 0000:00:05.0 eth0: Keep alive watchdog timeout."),
		want: finding(health.ReasonNICDriverReset, "eth0", "ENA device eth0 missed its keep-alive; the driver resets it"),
	},
	{
		name: "another driver's reset completion line",
		line: kmsg("nvme nvme0: Device reset completed successfully"),
	},
	{
		name: "i40e tx_timeout recovery",
		line: kmsg("i40e 0000:3b:00.0 ens1f0: tx_timeout recovery level 1, txqueue 5"),
		want: finding(health.ReasonNICDriverReset, "ens1f0", "ens1f0 (i40e): transmit timeout, driver recovery level 1 (queue, PF or core reset)"),
	},
	{
		name: "netdev watchdog, 6.8+ on a device without a parent",
		line: kmsg("bond0: NETDEV WATCHDOG: CPU: 1: transmit queue 0 timed out 5004 ms"),
		want: finding(health.ReasonNICTransmitTimeout, "bond0", "bond0: transmit queue 0 timed out; the driver resets the device"),
	},
	{
		name: "ENA watchdog handler, before 6.9",
		line: kmsg("ena 0000:00:05.0 eth0: Transmit time out"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ENA): transmit queue timed out; the driver resets the device"),
	},
	{
		name: "ENA watchdog handler, 6.9+",
		line: kmsg("ena 0000:00:05.0 eth0: TX q 3 is paused for too long (threshold 5000000). Time since last napi 5004000 usec. napi scheduled: 1"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ENA): transmit queue 3 timed out; the driver resets the device"),
	},
	{
		name: "ENA missing TX completion",
		line: kmsg("ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time, qid 2, index 219. 5004 usecs have passed since last napi execution. Napi scheduled: 0"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ENA): transmit queue 2 has packets the device did not complete in time"),
	},
	{
		name: "ENA missing TX completion, 6.9+",
		line: kmsg("ena 0000:00:05.0 ens5: TX hasn't completed, qid 0, index 17. 5120 usecs from last napi execution, napi scheduled: 1"),
		want: finding(health.ReasonNICTransmitTimeout, "ens5", "ens5 (ENA): transmit queue 0 has packets the device did not complete in time"),
	},
	{
		name: "mlx5 TX timeout",
		line: kmsg("mlx5_core 0000:3b:00.0 ens1f0np0: TX timeout on queue: 3, SQ: 0x10c, CQ: 0x4f, SQ Cons: 0x0 SQ Prod: 0x1, usecs since last trans: 16732000"),
		want: finding(health.ReasonNICTransmitTimeout, "ens1f0np0", "ens1f0np0 (mlx5_core): transmit queue 3 timed out; the driver recovers the queue"),
	},
	{
		name: "mlx5 TX timeout, 4.x",
		line: kmsg("mlx5_core 0000:5e:00.1 enp94s0f1: TX timeout on queue: 7, SQ: 0x8d, CQ: 0x41e, SQ Cons: 0x2c1 SQ Prod: 0x2d0"),
		want: finding(health.ReasonNICTransmitTimeout, "enp94s0f1", "enp94s0f1 (mlx5_core): transmit queue 7 timed out; the driver recovers the queue"),
	},
	{
		name: "virtio_net TX timeout",
		line: kmsg("virtio_net virtio0 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 5004000 usecs ago"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (virtio_net): transmit queue 0 timed out; the driver recovers the queue"),
	},
	{
		name: "i40e watchdog handler",
		line: kmsg("i40e 0000:3b:00.0 ens1f0: tx_timeout: VSI_seid: 390, Q 5, NTC: 0x1a4, HWB: 0x1a4, NTU: 0x1b2, TAIL: 0x1b2, INT: 0x1"),
		want: finding(health.ReasonNICTransmitTimeout, "ens1f0", "ens1f0 (i40e): transmit queue 5 timed out; the driver resets the device"),
	},
	{
		name: "ice watchdog handler",
		line: kmsg("ice 0000:17:00.0 ens2f0: tx_timeout: VSI_num: 6, Q 12, NTC: 0x0, HW_HEAD: 0x0, NTU: 0x3, INT: 0x0"),
		want: finding(health.ReasonNICTransmitTimeout, "ens2f0", "ens2f0 (ice): transmit queue 12 timed out; the driver resets the device"),
	},
	{
		name: "ixgbe hang detection, multi-line record",
		line: kmsg("ixgbe 0000:01:00.0 eth0: Detected Tx Unit Hang \n  Tx Queue             <4>\n  TDH, TDT             <1e2>, <1f8>\n  next_to_use          <1f8>\n  next_to_clean        <1e2>\ntx_buffer_info[next_to_clean]\n  time_stamp           <1001a2b3c>\n  jiffies              <1001a2f8d>"),
		want: finding(health.ReasonNICTransmitTimeout, "eth0", "eth0 (ixgbe): the driver detected a transmit unit hang and resets the adapter"),
	},
	{
		name: "igb hang detection, no interface in the prefix",
		line: kmsg("igb 0000:03:00.0: Detected Tx Unit Hang\n  Tx Queue             <0>\n  TDH                  <8c>"),
		want: finding(health.ReasonNICTransmitTimeout, "0000:03:00.0", "igb device 0000:03:00.0: the driver detected a transmit unit hang and resets the adapter"),
	},
	{
		name: "e1000e hang detection",
		line: kmsg("e1000e 0000:00:19.0 enp0s25: Detected Hardware Unit Hang:\n  TDH                  <d4>"),
		want: finding(health.ReasonNICTransmitTimeout, "enp0s25", "enp0s25 (e1000e): the driver detected a transmit unit hang and resets the adapter"),
	},
	{
		name: "ENA reset requested",
		line: kmsg("ena 0000:00:05.0 eth0: Trigger reset is on"),
		want: finding(health.ReasonNICDriverReset, "eth0", "ENA device eth0 is being reset by its driver"),
	},
	{
		name: "ENA reset completed, 4.14 without driver info",
		line: kmsg("ena 0000:00:05.0: Device reset completed successfully"),
		want: finding(health.ReasonNICDriverReset, "0000:00:05.0", "ENA device 0000:00:05.0 was reset by its driver"),
	},
	{
		name: "ENA reset failed",
		line: kmsg("ena 0000:00:05.0: Reset attempt failed. Can not reset the device"),
		want: finding(health.ReasonNICDriverReset, "0000:00:05.0", "ENA device 0000:00:05.0: the driver's reset failed; the interface stays down"),
	},
	{
		name: "ENA admin queue lost",
		line: kmsg("ena 0000:00:05.0 eth0: ENA admin queue is not in running state!"),
		want: finding(health.ReasonNICDriverReset, "eth0", "ENA device eth0 lost its admin queue; the driver resets it"),
	},
	{
		name: "ENA lost TX completions",
		line: kmsg("ena 0000:00:05.0 eth0: The number of lost tx completions is above the threshold (129 > 128). Reset the device"),
		want: finding(health.ReasonNICDriverReset, "eth0", "ENA device eth0 lost 129 transmit completions; the driver resets it"),
	},
	{
		name: "ENA lost TX completions, 6.9+",
		line: kmsg("ena 0000:00:05.0 eth0: Lost TX completions are above the threshold (129 > 128). Completion transmission timeout: 5000."),
		want: finding(health.ReasonNICDriverReset, "eth0", "ENA device eth0 lost 129 transmit completions; the driver resets it"),
	},
	{
		name: "i40e tx_timeout recovery, before 5.6",
		line: kmsg("i40e 0000:3b:00.1 ens1f1: tx_timeout recovery level 2, hung_queue 3"),
		want: finding(health.ReasonNICDriverReset, "ens1f1", "ens1f1 (i40e): transmit timeout, driver recovery level 2 (queue, PF or core reset)"),
	},
	{
		name: "i40e tx_timeout recovery exhausted",
		line: kmsg("i40e 0000:3b:00.0 ens1f0: tx_timeout recovery unsuccessful, device is in non-recoverable state."),
		want: finding(health.ReasonNICDriverReset, "ens1f0", "ens1f0 (i40e): every transmit-timeout recovery failed; the device is left down"),
	},
	{
		name: "ice tx_timeout recovery",
		line: kmsg("ice 0000:17:00.0 ens2f0: tx_timeout recovery level 1, txqueue 12"),
		want: finding(health.ReasonNICDriverReset, "ens2f0", "ens2f0 (ice): transmit timeout, driver recovery level 1 (queue, PF or core reset)"),
	},
	{
		name: "ixgbe hang reset",
		line: kmsg("ixgbe 0000:01:00.0 eth0: tx hang 1 detected on queue 4, resetting adapter"),
		want: finding(health.ReasonNICDriverReset, "eth0", "eth0 (ixgbe): transmit hang #1 on queue 4; the driver resets the adapter"),
	},
	{
		name: "ixgbe watchdog reset",
		line: kmsg("ixgbe 0000:01:00.1 eth1: initiating reset due to tx timeout"),
		want: finding(health.ReasonNICDriverReset, "eth1", "eth1 (ixgbe): the driver resets the adapter after a transmit timeout"),
	},
	{
		name: "ixgbe reset subtask",
		line: kmsg("ixgbe 0000:01:00.1 eth1: Reset adapter"),
		want: finding(health.ReasonNICDriverReset, "eth1", "eth1 (ixgbe): the driver resets the adapter"),
	},
	{
		name: "mlx5 health recovery",
		line: kmsg("mlx5_core 0000:3b:00.0: mlx5_health_try_recover:340:(pid 1234): starting health recovery flow"),
		want: finding(health.ReasonNICDriverReset, "0000:3b:00.0", "mlx5 device 0000:3b:00.0: fatal device error, the driver reloads the device"),
	},
	{
		name: "mlx5 health recovery, 4.x",
		line: kmsg("mlx5_core 0000:5e:00.0: starting health recovery flow"),
		want: finding(health.ReasonNICDriverReset, "0000:5e:00.0", "mlx5 device 0000:5e:00.0: fatal device error, the driver reloads the device"),
	},
	{
		name: "mlx5 health recovery failed",
		line: kmsg("mlx5_core 0000:3b:00.0: mlx5_health_try_recover:346:(pid 1234): health recovery failed"),
		want: finding(health.ReasonNICDriverReset, "0000:3b:00.0", "mlx5 device 0000:3b:00.0: the driver could not recover the device; its interfaces stay down"),
	},
	// Negatives: lines of the same drivers that are not a timeout or reset.
	{name: "ENA probe", line: kmsg("ena 0000:00:05.0: Elastic Network Adapter (ENA) found at mem febf4000, mac addr 02:1a:2b:3c:4d:5e")},
	{name: "ENA LLQ notice", line: kmsg("ena 0000:00:05.0: ENA Large LLQ is disabled")},
	{name: "mlx5 link up", line: kmsg("mlx5_core 0000:3b:00.0 ens1f0np0: Link up")},
	{name: "mlx5 health poll", line: kmsg("mlx5_core 0000:3b:00.0: poll_health:802:(pid 0): device's health compromised - reached miss count")},
	{name: "virtio_net device probe", line: kmsg("virtio_net virtio0 enp1s0: renamed from eth0")},
	{name: "ixgbe link", line: kmsg("ixgbe 0000:01:00.0 eth0: NIC Link is Up 10 Gbps, Flow Control: RX/TX")},
	{name: "ixgbe reset by a user", line: kmsg("ixgbe 0000:01:00.0 eth0: Reset adapter request from user space")},
	{name: "i40e link", line: kmsg("i40e 0000:3b:00.0 ens1f0: NIC Link is Up, 25 Gbps Full Duplex, Requested FEC: None, Negotiated FEC: None, Autoneg: False, Flow Control: None")},
	{name: "a log line quoting a timeout from a user process", line: kmsg("audit: type=1400 apparmor=\"DENIED\" comm=\"tx timeout on queue\"")},
	{
		name: "link flaps are InterfaceNotRunning's business, from netlink",
		line: kmsg("ena 0000:00:05.0 eth0: Link is down"),
	},
}

func TestRules(t *testing.T) {
	mt, err := rules.Compile(Rules())
	if err != nil {
		t.Fatal(err)
	}
	m := New(detection.Env{HostRoot: t.TempDir()}, Options{})
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			var got []detection.Finding
			mt.Match(tc.line, func(match logline.Match) { got = append(got, m.Interpret(match)...) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("line %q\n got %+v\nwant %+v", tc.line.Text, got, tc.want)
			}
		})
	}
}

func TestEveryRuleHasAPositiveCase(t *testing.T) {
	var positives []logline.Line
	for _, tc := range ruleCases {
		if tc.want != nil {
			positives = append(positives, tc.line)
		}
	}
	monitortest.EveryRuleMatches(t, Rules(), positives)
	monitortest.NoForgeryMatches(t, Rules(), positives)
}

// TestRegistryCoverage: every NetworkingReady reason is produced by a rule
// (log) or declared by a check (check), and nothing else is.
func TestRegistryCoverage(t *testing.T) {
	monitortest.RegistryCoverage(t, New(detection.Env{HostRoot: t.TempDir()}, Options{}), health.NetworkingReady)
}

// TestThisMachineRaisesNothing runs every check against the real host this
// test runs on (host root /, the test's own network namespace): real
// netlink, real ethtool ioctls, real /proc, the real resolver. A clean
// machine raises nothing.
func TestThisMachineRaisesNothing(t *testing.T) {
	m := New(detection.Env{}, Options{})
	for _, c := range m.Checks() {
		for range 3 {
			fs, err := c.Run(context.Background())
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
			if len(fs) != 0 {
				t.Errorf("%s on this machine: %v", c.Name, fs)
			}
		}
	}
}

// TestFreshNamespaceRaisesNothing: a new network namespace with only
// loopback up, inspected through NetNS with the real host root (this
// machine's resolv.conf: its resolver has no route from there, so the DNS
// query never leaves, which is not an unreachable resolver).
func TestFreshNamespaceRaisesNothing(t *testing.T) {
	ns := netnstest.New(t)
	ns.Up("lo")
	m := New(detection.Env{}, Options{NetNS: ns.Path})
	for _, c := range m.Checks() {
		for range 3 {
			fs, err := c.Run(context.Background())
			if err != nil || len(fs) != 0 {
				t.Errorf("%s in a fresh namespace: %v, %v", c.Name, fs, err)
			}
		}
	}
}
