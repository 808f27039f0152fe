package networking

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"nodemend.dev/nodemend/pkg/detection"
)

// Config configures the networking monitor (NetworkingReady).
type Config struct {
	detection.Switch `json:",inline"`
	// CheckInterval is the period of every networking check but the slow
	// ones.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
	// SlowCheckInterval is the period of the checks that read a lot (the
	// whole iptables ruleset, every interface's udev record) for faults that
	// come with configuration changes; never shorter than checkInterval.
	SlowCheckInterval detection.Duration `json:"slowCheckInterval,omitempty"`
	// ProbeTimeout bounds the input of one check (netlink, ethtool, /proc)
	// and each network probe (DNS, health endpoints).
	ProbeTimeout detection.Duration `json:"probeTimeout,omitempty"`
	// ExcludeInterfaces is an RE2 pattern of interface names that
	// InterfaceNotUp/InterfaceNotRunning do not watch; empty means the
	// built-in list (veth*, cali*, lxc*, docker*, ...).
	ExcludeInterfaces string `json:"excludeInterfaces,omitempty"`
	// ExcludeLinkTypes are link types that InterfaceNotUp/InterfaceNotRunning
	// do not watch, whatever the name: a kind as ip -d link prints it (gre,
	// ipoib, vxlan) or a hardware type as ip link prints it after "link/"
	// (infiniband, sit). Left out means the built-in list (InfiniBand, IP
	// tunnels, overlays, virtual devices); [] means none.
	ExcludeLinkTypes []string `json:"excludeLinkTypes,omitempty"`
	// NetNS is the network namespace to inspect, a host path (e.g.
	// /proc/1/ns/net when the agent pod does not use hostNetwork); empty
	// means the agent's own.
	NetNS string `json:"netns,omitempty"`
	// DNSServer is the resolver to probe, "host" or "host:port"; empty
	// means the nameservers of the host's /etc/resolv.conf.
	DNSServer string `json:"dnsServer,omitempty"`
	// DNSQueryName is the name the DNS probe asks for.
	DNSQueryName string `json:"dnsQueryName,omitempty"`
	// KubeProxyHealthz is kube-proxy's health address (host:port).
	KubeProxyHealthz string `json:"kubeProxyHealthz,omitempty"`
	// AllowedIPTablesChains are iptables chains, as "table/chain" (e.g.
	// "filter/MY-FIREWALL"), whose REJECT and DROP rules are known to be
	// good: UnexpectedRejectRule does not report them. The chains of
	// Kubernetes, the common CNIs and container engines are always allowed.
	AllowedIPTablesChains []string `json:"allowedIPTablesChains,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out. The DNS
// probe asks for the root: any resolver answers it, if only with REFUSED,
// without depending on a zone the cluster may not have; kube-proxy's health
// address is its --healthz-bind-address default.
func DefaultConfig() Config {
	return Config{Switch: detection.Enabled(), CheckInterval: detection.Seconds(30), SlowCheckInterval: detection.Seconds(300),
		ProbeTimeout: detection.Seconds(5), DNSQueryName: ".", KubeProxyHealthz: "127.0.0.1:10256",
		ExcludeLinkTypes: slices.Clone(DefaultExcludeLinkTypes)}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	errs := detection.Errors(
		detection.MinPeriod(path+".checkInterval", c.CheckInterval),
		detection.MinPeriod(path+".slowCheckInterval", c.SlowCheckInterval),
		detection.MinPeriod(path+".probeTimeout", c.ProbeTimeout),
		detection.NotLonger(path+".probeTimeout", c.ProbeTimeout, c.CheckInterval),
		detection.AbsolutePath(path+".netns", c.NetNS),
	)
	if c.ExcludeInterfaces != "" {
		if _, err := regexp.Compile(c.ExcludeInterfaces); err != nil {
			errs = append(errs, fmt.Errorf("%s.excludeInterfaces: %w", path, err))
		}
	}
	for i, lt := range c.ExcludeLinkTypes {
		if !ValidLinkType(lt) {
			errs = append(errs, fmt.Errorf("%s.excludeLinkTypes[%d]: %q is not a link kind or hardware type as ip link prints them (e.g. gre, infiniband)", path, i, lt))
		}
	}
	if c.DNSServer != "" && !detection.HostPort(c.DNSServer, false) {
		errs = append(errs, fmt.Errorf("%s.dnsServer: %q is not host or host:port", path, c.DNSServer))
	}
	for i, ch := range c.AllowedIPTablesChains {
		table, chain, ok := strings.Cut(ch, "/")
		if !ok || table == "" || chain == "" || strings.ContainsAny(chain, "/ \t") || strings.ContainsAny(table, " \t") {
			errs = append(errs, fmt.Errorf("%s.allowedIPTablesChains[%d]: %q is not table/chain (e.g. filter/MY-FIREWALL)", path, i, ch))
		}
	}
	if !detection.HostPort(c.KubeProxyHealthz, true) {
		errs = append(errs, fmt.Errorf("%s.kubeProxyHealthz: %q is not host:port", path, c.KubeProxyHealthz))
	}
	return errs
}

// Options are the monitor's options for the section, with this node's pods.
func (c Config) Options(pods PodLister) Options {
	return Options{
		AllowedIPTablesChains: c.AllowedIPTablesChains,
		Pods:                  pods,
		Period:                c.CheckInterval.Duration,
		SlowPeriod:            c.SlowCheckInterval.Duration,
		ProbeTimeout:          c.ProbeTimeout.Duration,
		ExcludeInterfaces:     c.ExcludeInterfaces,
		ExcludeLinkTypes:      c.ExcludeLinkTypes,
		NetNS:                 c.NetNS,
		DNSServer:             c.DNSServer,
		DNSQueryName:          c.DNSQueryName,
		KubeProxyHealthz:      c.KubeProxyHealthz,
	}
}
