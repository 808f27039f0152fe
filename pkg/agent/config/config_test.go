package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/networking"
	"nodemend.dev/nodemend/pkg/monitors/storage"

	"nodemend.dev/nodemend/pkg/health"
)

func TestParseDefaultsAndOverrides(t *testing.T) {
	c, err := Parse([]byte(`
monitors:
  containerRuntime:
    enabled: false
reasons:
  SoftLockup:
    disabled: true
  ForkFailedOutOfPIDs:
    severity: Warning
  ApproachingKernelPidMax:
    threshold: 85
  KernelBug:
    quietPeriod: 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.MonitorEnabled("kernel") || c.MonitorEnabled("containerRuntime") {
		t.Fatal("monitor toggles not applied")
	}
	if c.Monitors.Section("kernel").(kernel.Config).CheckInterval.Duration != 30*time.Second || c.Sources.Kmsg.Lookback.Duration != 10*time.Minute {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if _, ok := c.Effective(health.ReasonSoftLockup); ok {
		t.Fatal("disabled reason is still effective")
	}
	if r, _ := c.Effective(health.ReasonForkFailedOutOfPIDs); r.Severity != health.Warning {
		t.Fatalf("severity downgrade not applied: %v", r.Severity)
	}
	if got := c.Threshold(health.ReasonApproachingKernelPidMax); got != 85 {
		t.Fatalf("threshold override: got %v", got)
	}
	if r, _ := c.Effective(health.ReasonKernelBug); r.QuietPeriod != 2*time.Minute {
		t.Fatalf("quiet period override: got %v", r.QuietPeriod)
	}
	if got := c.Threshold(health.ReasonApproachingMaxOpenFiles); got != 70 {
		t.Fatalf("threshold default: got %v", got)
	}
}

func TestParseRejects(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown key":        {"monitors:\n  kernel:\n    enabeld: true\n", `unknown field "enabeld"`},
		"unknown reason":     {"reasons:\n  NoSuchReason: {disabled: true}\n", "reasons.NoSuchReason: unknown reason"},
		"severity upgrade":   {"reasons:\n  SoftLockup: {severity: Fatal}\n", "may only be lowered from Warning, not raised to Fatal"},
		"bad severity":       {"reasons:\n  SoftLockup: {severity: Critical}\n", `"Critical" is not Fatal, Warning or Info`},
		"threshold on none":  {"reasons:\n  SoftLockup: {threshold: 3}\n", "this reason has no threshold"},
		"negative threshold": {"reasons:\n  ApproachingKernelPidMax: {threshold: -1}\n", "must be positive"},
		"quiet on check":     {"reasons:\n  PodStuckTerminating: {quietPeriod: 1m}\n", "only log-derived reasons have a quiet period"},
		"quiet below floor":  {"reasons:\n  ForkFailedOutOfPIDs: {quietPeriod: 59s}\n", "reasons.ForkFailedOutOfPIDs.quietPeriod: 59s is shorter than the 1m0s floor"},
		"family quiet 1s":    {"reasons:\n  NvidiaXIDError: {quietPeriod: 1s}\n", "reasons.NvidiaXIDError.quietPeriod: 1s is shorter than the 1m0s floor"},
		"bad duration":       {"monitors:\n  kernel:\n    checkInterval: soon\n", "invalid duration"},
		"tiny interval":      {"monitors:\n  kernel:\n    checkInterval: 10ms\n", "below the 1s minimum"},
		"journal mode":       {"sources:\n  journal:\n    mode: syslog\n", `"syslog" is not journalctl, file or off`},
		"relative path":      {"sources:\n  journal:\n    file: x.jsonl\n", "must be an absolute path"},
		"not yaml":           {"monitors: [", "invalid agent config"},
		"family raised":      {"reasons:\n  NvidiaXIDWarning: {severity: Fatal}\n", "may only be lowered from Warning (NvidiaXID13Warning), not raised to Fatal"},
		"family threshold":   {"reasons:\n  NvidiaXIDError: {threshold: 2}\n", "no member of this family has a threshold"},
		"unknown family":     {"reasons:\n  DCGMFieldErrorz: {disabled: true}\n", "unknown reason or family"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.MonitorEnabled("kernel") || !c.MonitorEnabled("containerRuntime") {
		t.Fatal("monitors are on by default")
	}
}

func TestNetworkingAndStorageSections(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.MonitorEnabled("networking") || !c.MonitorEnabled("storage") {
		t.Fatal("networking and storage are on by default")
	}
	n, s := c.Monitors.Section("networking").(networking.Config), c.Monitors.Section("storage").(storage.Config)
	if n.CheckInterval.Duration != 30*time.Second || n.ProbeTimeout.Duration != 5*time.Second || n.DNSQueryName != "." ||
		n.KubeProxyHealthz != "127.0.0.1:10256" || n.ExcludeInterfaces != "" || n.NetNS != "" || n.DNSServer != "" {
		t.Fatalf("networking defaults: %+v", n)
	}
	if s.CheckInterval.Duration != 30*time.Second || s.ProbeTimeout.Duration != 10*time.Second || s.ProbeDir != "/var/lib/nodemend/probe" ||
		strings.Join(s.Filesystems, ",") != "/,/var/lib/kubelet,/var/lib/containerd" {
		t.Fatalf("storage defaults: %+v", s)
	}

	c, err = Parse([]byte(`
monitors:
  networking:
    enabled: false
    checkInterval: 1m
    probeTimeout: 3s
    excludeInterfaces: '^(veth.*|eth1)$'
    netns: /proc/1/ns/net
    dnsServer: "[fd00:ec2::253]:53"
    dnsQueryName: kubernetes.default.svc.cluster.local
    kubeProxyHealthz: 127.0.0.1:10249
  storage:
    filesystems: [/, /data]
    probeDir: /data/nodemend/probe
    probeTimeout: 20s
`))
	if err != nil {
		t.Fatal(err)
	}
	n, s = c.Monitors.Section("networking").(networking.Config), c.Monitors.Section("storage").(storage.Config)
	if c.MonitorEnabled("networking") || !c.MonitorEnabled("storage") || n.CheckInterval.Duration != time.Minute || n.ProbeTimeout.Duration != 3*time.Second ||
		n.ExcludeInterfaces != "^(veth.*|eth1)$" || n.NetNS != "/proc/1/ns/net" || n.DNSServer != "[fd00:ec2::253]:53" ||
		n.DNSQueryName != "kubernetes.default.svc.cluster.local" || n.KubeProxyHealthz != "127.0.0.1:10249" {
		t.Fatalf("networking overrides: %+v", n)
	}
	if strings.Join(s.Filesystems, ",") != "/,/data" || s.ProbeDir != "/data/nodemend/probe" || s.ProbeTimeout.Duration != 20*time.Second || s.CheckInterval.Duration != 30*time.Second {
		t.Fatalf("storage overrides: %+v", s)
	}
	// An explicit empty list watches no filesystem; an absent one the defaults.
	c, err = Parse([]byte("monitors:\n  storage:\n    filesystems: []\n    probeTimeout: 5s\n"))
	if err != nil || c.Monitors.Section("storage").(storage.Config).Filesystems == nil || len(c.Monitors.Section("storage").(storage.Config).Filesystems) != 0 {
		t.Fatalf("%+v, %v", c.Monitors.Section("storage").(storage.Config), err)
	}
	// Reasons of the new monitors can be overridden like any other.
	c, err = Parse([]byte("reasons:\n  InterfaceNotUp: {threshold: 3}\n  FilesystemReadOnly: {severity: Warning}\n  PPSExceeded: {disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Threshold(health.ReasonInterfaceNotUp) != 3 || c.Threshold(health.ReasonDNSResolverUnreachable) != 3 || c.Threshold(health.ReasonFilesystemNearFull) != 80 {
		t.Fatal("thresholds")
	}
	if r, _ := c.Effective(health.ReasonFilesystemReadOnly); r.Severity != health.Warning {
		t.Fatal("severity downgrade")
	}
	if _, on := c.Effective(health.ReasonPPSExceeded); on {
		t.Fatal("disabled reason")
	}
}

func TestNetworkingAndStorageRejects(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"bad exclusion pattern":    {"monitors:\n  networking:\n    excludeInterfaces: 'veth(('\n", "monitors.networking.excludeInterfaces: error parsing regexp"},
		"relative netns":           {"monitors:\n  networking:\n    netns: proc/1/ns/net\n", "monitors.networking.netns: \"proc/1/ns/net\" must be an absolute path"},
		"bad dns server":           {"monitors:\n  networking:\n    dnsServer: 'http://10.0.0.2/'\n", "monitors.networking.dnsServer"},
		"bad kube-proxy address":   {"monitors:\n  networking:\n    kubeProxyHealthz: localhost\n", "monitors.networking.kubeProxyHealthz"},
		"probe longer than period": {"monitors:\n  networking:\n    probeTimeout: 1m\n", "monitors.networking.probeTimeout: 1m0s is longer than checkInterval 30s"},
		"tiny storage interval":    {"monitors:\n  storage:\n    checkInterval: 100ms\n", "monitors.storage.checkInterval: 100ms is below the 1s minimum"},
		"storage probe too long":   {"monitors:\n  storage:\n    probeTimeout: 31s\n", "monitors.storage.probeTimeout: 31s is longer than checkInterval 30s"},
		"relative filesystem":      {"monitors:\n  storage:\n    filesystems: [var/lib/kubelet]\n", "monitors.storage.filesystems[0]: \"var/lib/kubelet\" must be an absolute path"},
		"probe dir at root":        {"monitors:\n  storage:\n    probeDir: /\n", "monitors.storage.probeDir"},
		"unknown storage key":      {"monitors:\n  storage:\n    filesystem: [/]\n", `unknown field "filesystem"`},
		"raise a Warning to Fatal": {"reasons:\n  IODelays: {severity: Fatal}\n", "may only be lowered from Warning, not raised to Fatal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestDocumentedNetworkingAndStorageDefaults keeps docs/agent-config.md
// honest: its example file parses, and its networking and storage sections
// are the defaults.
func TestDocumentedNetworkingAndStorageDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/agent-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml block in docs/agent-config.md")
	}
	c, err := Parse([]byte(block))
	if err != nil {
		t.Fatalf("the documented config does not parse: %v", err)
	}
	d := Default()
	if !reflect.DeepEqual(c.Monitors.Section("networking").(networking.Config), d.Monitors.Section("networking").(networking.Config)) || !reflect.DeepEqual(c.Monitors.Section("storage").(storage.Config), d.Monitors.Section("storage").(storage.Config)) {
		t.Fatalf("documented %+v %+v\ndefaults %+v %+v", c.Monitors.Section("networking").(networking.Config), c.Monitors.Section("storage").(storage.Config), d.Monitors.Section("networking").(networking.Config), d.Monitors.Section("storage").(storage.Config))
	}
}

// A family name (NvidiaXIDError, NvidiaXIDWarning) overrides every member,
// as in the EKS Node Monitoring Agent's config; a member's own entry wins
// field by field.
func TestFamilyOverrides(t *testing.T) {
	c, err := Parse([]byte(`reasons:
  NvidiaXIDError: {severity: Warning, quietPeriod: 2h}
  NvidiaXID79Error: {severity: Info}
  NvidiaXIDWarning: {disabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r, on := c.Effective(health.ReasonNvidiaXID48Error); !on || r.Severity != health.Warning || r.QuietPeriod != 2*time.Hour {
		t.Fatalf("XID48 under the family override: %v %v %v", on, r.Severity, r.QuietPeriod)
	}
	if r, _ := c.Effective(health.ReasonNvidiaXID79Error); r.Severity != health.Info || r.QuietPeriod != 2*time.Hour {
		t.Fatalf("XID79: its own severity, the family's quiet period: %v %v", r.Severity, r.QuietPeriod)
	}
	for _, name := range []string{health.ReasonNvidiaXID13Warning, health.ReasonNvidiaXIDWarning} {
		if _, on := c.Effective(name); on {
			t.Fatalf("%s is in the disabled NvidiaXIDWarning family", name)
		}
	}
	if r, on := c.Effective(health.ReasonNvidiaDoubleBitError); !on || r.Severity != health.Fatal {
		t.Fatalf("NvidiaDoubleBitError is in no family: %v %v", on, r.Severity)
	}

	// A member may be lowered below its family's override, or stay at its
	// registered severity while the family is lowered.
	c, err = Parse([]byte("reasons:\n  NvidiaXIDWarning: {severity: Info}\n  NvidiaXID94Warning: {severity: Warning}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Effective(health.ReasonNvidiaXID94Warning); r.Severity != health.Warning {
		t.Fatalf("member override: %v", r.Severity)
	}
	if r, _ := c.Effective(health.ReasonNvidiaXID13Warning); r.Severity != health.Info {
		t.Fatalf("family override: %v", r.Severity)
	}
}
