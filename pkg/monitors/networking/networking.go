// Package networking is the networking monitor: it owns the NetworkingReady
// condition, on any Linux node and with any CNI.
//
// Periodic checks read the node's network namespace through netlink (links,
// addresses, routes), ethtool statistics through the ETHTOOL_GSTATS ioctl
// (the ENA allowance counters), /proc (conntrack, sysctls, CNI agent
// processes), the CNI agent's log or health endpoint, kube-proxy's health
// endpoint and the node's DNS resolvers. Log rules read kernel messages about
// NIC transmit timeouts and driver resets.
//
// Every check splits into a gatherer, the only I/O, run with a timeout so a
// wedged driver or a stuck rtnl lock cannot hold a scheduler worker, and a
// pure evaluation function. State that spans checks (consecutive failures,
// counter readings, "not running since") lives in the Monitor.
package networking

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/source/tail"
)

// Name is the registry monitor name.
const Name = "networking"

// DefaultExcludeInterfaces are interface names InterfaceNotUp and
// InterfaceNotRunning do not watch: the host ends of pod interfaces and the
// devices CNIs, container engines and kube-proxy create and delete as they
// please; InfiniBand ports by their names (ib*, as the EKS Node Monitoring
// Agent) and the kernel's tunnel fallback devices, which
// DefaultExcludeLinkTypes also recognises by type. Anchored at both ends.
const DefaultExcludeInterfaces = `^(veth.*|cali.*|lxc.*|docker\d*|br-[0-9a-f]+|cni\d*|flannel.*|vxlan.*|tunl\d*|tun\d*|tap.*|` +
	`kube-ipvs\d*|kube-bridge|nodelocaldns|ifb\d*|dummy\d*|cilium_.*|genev_sys_.*|eni[0-9a-f]{11}|vlan.*|` +
	`weave|datapath|vethwe.*|virbr\d*.*|nerdctl\d*|podman\d*|` +
	`ib.*|gre\d*|gretap\d*|erspan\d*|ip6gre\d*|ip6tnl\d*|sit\d*|ip_vti\d*|ip6_vti\d*)$`

// Options configure the monitor; Config.Options builds them from the config
// section. A zero period, timeout or name takes the one of DefaultConfig,
// the only place the defaults are written.
type Options struct {
	// Period is the period of every check but the slow ones.
	Period time.Duration
	// SlowPeriod is the period of the checks that read a lot (the whole
	// iptables ruleset, every interface's udev record) for faults that come
	// with configuration changes, not by the second; never shorter than
	// Period.
	SlowPeriod time.Duration
	// ProbeTimeout bounds the input gathering of one check: the netlink dumps,
	// ethtool ioctls and /proc reads, and each network probe.
	ProbeTimeout time.Duration
	// ExcludeInterfaces is an RE2 pattern of interface names not watched by
	// InterfaceNotUp and InterfaceNotRunning; "" means
	// DefaultExcludeInterfaces. It is matched against the whole name only if
	// it is anchored, like the default.
	ExcludeInterfaces string
	// ExcludeLinkTypes are the link kinds and hardware types
	// InterfaceNotUp and InterfaceNotRunning do not watch, whatever the
	// name; nil means DefaultExcludeLinkTypes, empty none.
	ExcludeLinkTypes []string
	// NetNS is the network namespace to inspect, as a host path read under
	// Env.HostRoot (e.g. /proc/1/ns/net for an agent pod without
	// hostNetwork, or /run/netns/NAME). "" means the agent's own.
	NetNS string
	// DNSServer is the resolver to probe, "host" or "host:port"; "" means
	// every nameserver of <host-root>/etc/resolv.conf.
	DNSServer string
	// DNSQueryName is the name asked.
	DNSQueryName string
	// KubeProxyHealthz is kube-proxy's health address, host:port.
	KubeProxyHealthz string
	// Stats opens ethtool statistics readers; nil means the ETHTOOL_GSTATS
	// ioctl. Tests inject fixtures.
	Stats StatsSource
	// Ruleset dumps iptables rulesets; nil means iptables-save (IPTablesSave).
	Ruleset RulesetReader
	// AllowedIPTablesChains are "table/chain" names (e.g.
	// "filter/MY-FIREWALL") whose REJECT and DROP rules are known to be good.
	AllowedIPTablesChains []string
	// Pods lists this node's pods (the API server's cache), for the checks
	// that compare the VPC CNI's and the network policy agent's state with
	// the pods'. Nil leaves those comparisons out.
	Pods PodLister
}

// Monitor implements detection.Monitor for NetworkingReady.
type Monitor struct {
	env     detection.Env
	opts    Options
	ns      netNS
	exclude exclusion
	// excludeErr is why ExcludeInterfaces did not compile; the interface
	// check reports it instead of guessing.
	excludeErr error
	// felixAddr is calico-node's readiness endpoint (tests move it).
	felixAddr string

	// One guard per check: a gatherer stuck in the kernel blocks only its
	// own check, and is not started again while stuck.
	ifaceGuard, enaGuard, sysctlGuard, cniGuard, proxyGuard, dnsGuard, vpcGuard, macGuard, iptGuard, npaGuard, rdmaGuard bounded.Guard
	// npaPID is the network policy agent's last PID (systemd), npaLog its
	// log's tail; only the guarded gatherer touches them.
	npaPID int
	npaLog tail.Cursor

	mu       sync.Mutex
	ifaces   ifaceState
	counters map[counterKey]uint64
	cni      cniState
	proxy    proxyState
	dns      strikes
	vpc      vpcEval
	npa      npaState
	rdma     rdmaState
}

var _ detection.Monitor = (*Monitor)(nil)

// New builds the networking monitor. It opens nothing: every check opens its
// netlink and ethtool sockets in the inspected namespace and closes them.
func New(env detection.Env, opts Options) *Monitor {
	env = env.WithDefaults()
	detection.FillDefaults(&opts, DefaultConfig().Options(nil))
	opts.SlowPeriod = max(opts.SlowPeriod, opts.Period)
	if opts.ExcludeInterfaces == "" {
		opts.ExcludeInterfaces = DefaultExcludeInterfaces
	}
	if opts.Stats == nil {
		opts.Stats = EthtoolStats{}
	}
	if opts.Ruleset == nil {
		opts.Ruleset = IPTablesSave{HostRoot: env.HostRoot}
	}
	m := &Monitor{env: env, opts: opts, counters: map[counterKey]uint64{}, felixAddr: felixReadinessAddr}
	if opts.NetNS != "" {
		m.ns = netNS{path: filepath.Join(env.HostRoot, opts.NetNS)}
	}
	m.exclude.types = normalizeLinkTypes(opts.ExcludeLinkTypes)
	m.exclude.names, m.excludeErr = regexp.Compile(opts.ExcludeInterfaces)
	if m.excludeErr != nil {
		m.excludeErr = fmt.Errorf("invalid interface exclusion pattern %q: %w", opts.ExcludeInterfaces, m.excludeErr)
	}
	return m
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	p := m.opts.Period
	return []detection.Check{
		{
			Name:   "net-interfaces",
			Period: p,
			Reasons: []string{health.ReasonInterfaceNotUp, health.ReasonInterfaceNotRunning,
				health.ReasonMissingLoopbackInterface, health.ReasonMissingDefaultRoutes},
			Run: m.runInterfaces,
		},
		{
			Name:    "net-ena-allowances",
			Period:  p,
			Reasons: allowanceReasons(),
			Run:     m.runAllowances,
		},
		{
			Name:    "net-sysctls",
			Period:  p,
			Reasons: []string{health.ReasonApproachingConntrackMax, health.ReasonNetworkSysctl},
			Run:     m.runSysctls,
		},
		{
			Name:   "net-cni",
			Period: p,
			Reasons: []string{health.ReasonIPAMDNotRunning, health.ReasonIPAMDNotReady,
				health.ReasonCNIAgentNotRunning, health.ReasonCNIAgentNotReady,
				health.ReasonIPAMDNoIPs, health.ReasonIPAMDRepeatedlyRestart},
			Run: m.runCNI,
		},
		{
			Name:   "net-vpc-cni-state",
			Period: p,
			Reasons: []string{health.ReasonMissingIPRoutes, health.ReasonMissingIPRules,
				health.ReasonIPAMDInconsistentState},
			Run: m.runVPCCNI,
		},
		{
			Name:    "net-mac-address-policy",
			Period:  m.opts.SlowPeriod,
			Reasons: []string{health.ReasonMACAddressPolicyMisconfigured},
			Run:     m.runMACPolicy,
		},
		{
			Name:    "net-iptables",
			Period:  m.opts.SlowPeriod,
			Reasons: []string{health.ReasonPortConflict, health.ReasonUnexpectedRejectRule},
			Run:     m.runIPTables,
		},
		{
			Name:   "net-network-policy-agent",
			Period: p,
			Reasons: []string{health.ReasonNPANotRunning, health.ReasonNPARepeatedlyRestart,
				health.ReasonNPABPFRecoveryError},
			Run: m.runNPA,
		},
		{
			Name:    "net-rdma-counters",
			Period:  p,
			Reasons: []string{health.ReasonEFAErrorMetric},
			Run:     m.runRDMA,
		},
		{
			Name:    "net-kube-proxy",
			Period:  p,
			Reasons: []string{health.ReasonKubeProxyNotReady},
			Run:     m.runKubeProxy,
		},
		{
			Name:    "net-dns",
			Period:  p,
			Reasons: []string{health.ReasonDNSResolverUnreachable},
			Run:     m.runDNS,
		},
	}
}

// hostPath is a host path under the host root.
func (m *Monitor) hostPath(rel string) string { return filepath.Join(m.env.HostRoot, rel) }

// gather runs fn in the inspected network namespace, bounded by the probe
// timeout and guarded: a gatherer stuck in the kernel is reported as an
// error, and not started again until it returns.
func gather[T any](ctx context.Context, m *Monitor, g *bounded.Guard, what string, fn func() (T, error)) (T, error) {
	return gatherFor(ctx, m, g, what, m.opts.ProbeTimeout, fn)
}

// gatherFor is gather with its own timeout, for gatherers that run a tool
// over a large input.
func gatherFor[T any](ctx context.Context, m *Monitor, g *bounded.Guard, what string, timeout time.Duration, fn func() (T, error)) (T, error) {
	return bounded.Run(ctx, g, what, timeout, func() (T, error) {
		var v T
		err := m.ns.run(func() error {
			var err error
			v, err = fn()
			return err
		})
		return v, err
	})
}

// countThreshold is a reason's threshold as a count of at least 1.
func (m *Monitor) countThreshold(reason string) int {
	v := m.env.Threshold(reason)
	if math.IsNaN(v) || v < 1 {
		return 1
	}
	return int(math.Min(math.Ceil(v), 1<<30))
}

// secondsThreshold is a reason's threshold in seconds as a duration.
func (m *Monitor) secondsThreshold(reason string) time.Duration {
	v := m.env.Threshold(reason)
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	return time.Duration(math.Min(v*float64(time.Second), 1<<62))
}
