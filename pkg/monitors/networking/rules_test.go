package networking

import (
	"context"
	"slices"
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitor"
	"nodemend.dev/nodemend/pkg/rules"
)

func kmsg(text string) logline.Line { return logline.Line{Source: logline.Kmsg, Text: text, Time: t0} }

type ruleCase struct {
	name string
	line logline.Line
	want []monitor.Finding // nil: no match
}

func finding(reason, subject, msg string) []monitor.Finding {
	return []monitor.Finding{{Reason: reason, Subject: subject, Message: msg, Observed: t0}}
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
		name: "link flaps are InterfaceNotRunning's business, from netlink",
		line: kmsg("ena 0000:00:05.0 eth0: Link is down"),
	},
}

func TestRules(t *testing.T) {
	mt, err := rules.Compile(Rules())
	if err != nil {
		t.Fatal(err)
	}
	m := New(monitor.Env{HostRoot: t.TempDir()}, Options{})
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			var got []monitor.Finding
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
}

// TestRegistryCoverage: every NetworkingReady reason is produced by a rule
// (log) or declared by a check (check), and nothing else is.
func TestRegistryCoverage(t *testing.T) {
	monitortest.RegistryCoverage(t, New(monitor.Env{HostRoot: t.TempDir()}, Options{}), health.NetworkingReady)
}

// TestThisMachineRaisesNothing runs every check against the real host this
// test runs on (host root /, the test's own network namespace): real
// netlink, real ethtool ioctls, real /proc, the real resolver. A clean
// machine raises nothing.
func TestThisMachineRaisesNothing(t *testing.T) {
	m := New(monitor.Env{}, Options{})
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
	m := New(monitor.Env{}, Options{NetNS: ns.Path})
	for _, c := range m.Checks() {
		for range 3 {
			fs, err := c.Run(context.Background())
			if err != nil || len(fs) != 0 {
				t.Errorf("%s in a fresh namespace: %v, %v", c.Name, fs, err)
			}
		}
	}
}
