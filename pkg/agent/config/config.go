// Package config is the agent's configuration file: strict YAML, validated
// against the reason registry, with defaults that match the documentation
// (docs/agent-config.md).
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/health"
)

// Config is the whole agent config file.
type Config struct {
	Monitors Monitors `json:"monitors"`
	// Reasons overrides reasons, keyed by reason code or by family name
	// (NvidiaXIDError, NvidiaXIDWarning: every member; docs/reasons.md). A
	// reason's own entry takes precedence over its family's, field by field.
	Reasons  map[string]ReasonConfig `json:"reasons,omitempty"`
	Sources  Sources                 `json:"sources"`
	Exporter ExporterConfig          `json:"exporter"`
}

// Monitors holds one section per monitor.
type Monitors struct {
	Kernel           KernelMonitor     `json:"kernel"`
	ContainerRuntime RuntimeMonitor    `json:"containerRuntime"`
	Networking       NetworkingMonitor `json:"networking"`
	Storage          StorageMonitor    `json:"storage"`
	// The accelerator monitors share AcceleratedHardwareReady; each runs only
	// on nodes with its hardware.
	Nvidia NvidiaMonitor      `json:"nvidia"`
	Neuron AcceleratorMonitor `json:"neuron"`
	AMDGPU AcceleratorMonitor `json:"amdgpu"`
}

// KernelMonitor configures the kernel monitor (KernelReady).
type KernelMonitor struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
	// CheckInterval is the period of the /proc checks (pid, file, zombie, clock).
	CheckInterval Duration `json:"checkInterval,omitempty"`
}

// RuntimeMonitor configures the container runtime monitor (ContainerRuntimeReady).
type RuntimeMonitor struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
	// CRISocket is the runtime's CRI socket, under the host root. Empty means
	// containerd's default socket, expected only once it has been seen (a node
	// running another runtime is not faulty); a path set here is expected
	// from the start.
	CRISocket string `json:"criSocket,omitempty"`
	// CRITimeout bounds each CRI call.
	CRITimeout Duration `json:"criTimeout,omitempty"`
	// CheckInterval is the period of the CRI checks.
	CheckInterval Duration `json:"checkInterval,omitempty"`
}

// NetworkingMonitor configures the networking monitor (NetworkingReady).
type NetworkingMonitor struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
	// CheckInterval is the period of every networking check.
	CheckInterval Duration `json:"checkInterval,omitempty"`
	// ProbeTimeout bounds the input of one check (netlink, ethtool, /proc)
	// and each network probe (DNS, health endpoints).
	ProbeTimeout Duration `json:"probeTimeout,omitempty"`
	// ExcludeInterfaces is an RE2 pattern of interface names that
	// InterfaceNotUp/InterfaceNotRunning do not watch; empty means the
	// built-in list (veth*, cali*, lxc*, docker*, ...).
	ExcludeInterfaces string `json:"excludeInterfaces,omitempty"`
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
}

// StorageMonitor configures the storage monitor (StorageReady).
type StorageMonitor struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
	// CheckInterval is the period of every storage check.
	CheckInterval Duration `json:"checkInterval,omitempty"`
	// Filesystems are the host paths whose filesystems the node depends on:
	// they must not turn read-only, shut down or fill up.
	Filesystems []string `json:"filesystems,omitempty"`
	// ProbeDir is the directory, owned by the agent, where the write probe
	// writes and fsyncs a tiny file.
	ProbeDir string `json:"probeDir,omitempty"`
	// ProbeTimeout bounds the write probe and every statfs and NVMe ioctl.
	ProbeTimeout Duration `json:"probeTimeout,omitempty"`
}

// AcceleratorMonitor configures an accelerator monitor (nvidia, neuron,
// amdgpu → AcceleratedHardwareReady). An enabled monitor still runs only on
// nodes that have its hardware; elsewhere it writes nothing.
type AcceleratorMonitor struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
	// CheckInterval is the period of the device checks.
	CheckInterval Duration `json:"checkInterval,omitempty"`
	// ExpectedCount is how many devices the node must have; 0 means take it
	// from ExpectedCountLabel, else from the instance-type table.
	ExpectedCount int `json:"expectedCount,omitempty"`
	// ExpectedCountLabel names a node label whose value is the expected
	// device count (set by the node's provisioner).
	ExpectedCountLabel string `json:"expectedCountLabel,omitempty"`
	// InstanceTypeTable uses the built-in node.kubernetes.io/instance-type →
	// device count table when neither of the above gives a count.
	InstanceTypeTable *bool `json:"instanceTypeTable,omitempty"`
}

// NvidiaMonitor configures the nvidia monitor.
type NvidiaMonitor struct {
	AcceleratorMonitor `json:",inline"`
	// NVMLLibrary is the libnvidia-ml file to load, in the agent's own
	// filesystem (not under the host root: the dynamic loader resolves it).
	// Empty means libnvidia-ml.so.1 from the loader's search path.
	NVMLLibrary string `json:"nvmlLibrary,omitempty"`
	// DCGM reads NVIDIA DCGM's health watches where a host engine runs.
	DCGM DCGMConfig `json:"dcgm"`
}

// DCGMConfig configures the nvidia monitor's DCGM source
// (docs/accelerators.md, "DCGM"): health watches read through the dcgmi
// tool, and the GPU diagnostics a NodeDiagnostic asks for. DCGM is never
// required: a node without a host engine writes nothing for it.
type DCGMConfig struct {
	// Mode is auto (use DCGM when a host engine answers; DCGMError only when
	// one that answered stops), required (no host engine at all is
	// DCGMError) or off (never run dcgmi).
	Mode string `json:"mode,omitempty"`
	// Dcgmi is the dcgmi tool in the agent's own filesystem: a name looked
	// up in PATH, or an absolute path. It needs DCGM's libraries beside it
	// (the datacenter-gpu-manager package, or an image that ships it).
	Dcgmi string `json:"dcgmi,omitempty"`
	// HostEngine is the nv-hostengine dcgmi connects to (its --host):
	// host, host:port, or unix:///path for a socket. Empty means
	// localhost:5555, where the GPU operator's and the DCGM packages'
	// host engines listen.
	HostEngine string `json:"hostEngine,omitempty"`
	// CheckInterval is the period of the health watch and field checks.
	CheckInterval Duration `json:"checkInterval,omitempty"`
}

// ReasonConfig overrides one reason.
type ReasonConfig struct {
	// Disabled drops every detection of the reason.
	Disabled bool `json:"disabled,omitempty"`
	// Severity lowers the reason's severity (Fatal → Warning → Info); raising
	// it is refused, so config can never make a node repairable on its own.
	Severity string `json:"severity,omitempty"`
	// Threshold replaces the reason's default threshold (in the registry's unit).
	Threshold *float64 `json:"threshold,omitempty"`
	// QuietPeriod replaces the recovery quiet period of a Fatal log-derived
	// reason. Keep it longer than the repair toleration of its condition, or
	// a flapping fault may never be repaired.
	QuietPeriod *Duration `json:"quietPeriod,omitempty"`
}

// Sources configures the log sources.
type Sources struct {
	Kmsg    KmsgSource    `json:"kmsg"`
	Journal JournalSource `json:"journal"`
}

// KmsgSource configures the kernel log reader.
type KmsgSource struct {
	// Enabled reads the kernel log (<host-root>/dev/kmsg).
	Enabled *bool `json:"enabled,omitempty"`
	// Lookback replays records of the kernel ring buffer this recent at start.
	Lookback Duration `json:"lookback,omitempty"`
}

// JournalSource configures the systemd journal reader.
type JournalSource struct {
	// Mode is journalctl (follow the host journal), file (tail a JSON-lines
	// export, for tests and the simulation) or off.
	Mode string `json:"mode,omitempty"`
	// Directory is the journal directory under the host root (journalctl mode).
	Directory string `json:"directory,omitempty"`
	// File is the JSON-lines file under the host root (file mode).
	File string `json:"file,omitempty"`
	// Command is the journalctl binary.
	Command string `json:"command,omitempty"`
}

// ExporterConfig tunes status writes.
type ExporterConfig struct {
	// Heartbeat rewrites the conditions this often without change.
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// Coalesce waits this long after a change for others before writing.
	Coalesce Duration `json:"coalesce,omitempty"`
}

// DCGM modes.
const (
	DCGMAuto     = "auto"
	DCGMRequired = "required"
	DCGMOff      = "off"
)

// Journal modes.
const (
	JournalCtl  = "journalctl"
	JournalFile = "file"
	JournalOff  = "off"
)

// Default returns the configuration used when no file is given; every field
// that Parse leaves empty takes these values.
func Default() Config {
	on := true
	return Config{
		Monitors: Monitors{
			Kernel:           KernelMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second}},
			ContainerRuntime: RuntimeMonitor{Enabled: &on, CRITimeout: Duration{2 * time.Second}, CheckInterval: Duration{15 * time.Second}},
			Networking: NetworkingMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second}, ProbeTimeout: Duration{5 * time.Second},
				DNSQueryName: ".", KubeProxyHealthz: "127.0.0.1:10256"},
			Storage: StorageMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second}, ProbeTimeout: Duration{10 * time.Second},
				Filesystems: []string{"/", "/var/lib/kubelet", "/var/lib/containerd"}, ProbeDir: "/var/lib/nodemend/probe"},
			Nvidia: NvidiaMonitor{AcceleratorMonitor: AcceleratorMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second},
				ExpectedCountLabel: "nodemend.dev/expected-gpu-count", InstanceTypeTable: &on},
				DCGM: DCGMConfig{Mode: DCGMAuto, Dcgmi: "dcgmi", CheckInterval: Duration{time.Minute}}},
			Neuron: AcceleratorMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second},
				ExpectedCountLabel: "nodemend.dev/expected-neuron-device-count", InstanceTypeTable: &on},
			AMDGPU: AcceleratorMonitor{Enabled: &on, CheckInterval: Duration{30 * time.Second},
				ExpectedCountLabel: "nodemend.dev/expected-gpu-count", InstanceTypeTable: &on},
		},
		Sources: Sources{
			Kmsg:    KmsgSource{Enabled: &on, Lookback: Duration{10 * time.Minute}},
			Journal: JournalSource{Mode: JournalCtl, Directory: "/var/log/journal", File: "/var/log/nodemend/journal.jsonl", Command: "journalctl"},
		},
		Exporter: ExporterConfig{Heartbeat: Duration{5 * time.Minute}, Coalesce: Duration{5 * time.Millisecond}},
	}
}

// Parse strictly decodes a config file (unknown keys are errors), fills in
// defaults and validates it.
func Parse(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("invalid agent config: %w", err)
	}
	c.fillDefaults(Default())
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid agent config: %w", err)
	}
	return c, nil
}

func (c *Config) fillDefaults(d Config) {
	setBool(&c.Monitors.Kernel.Enabled, d.Monitors.Kernel.Enabled)
	setDur(&c.Monitors.Kernel.CheckInterval, d.Monitors.Kernel.CheckInterval)
	setBool(&c.Monitors.ContainerRuntime.Enabled, d.Monitors.ContainerRuntime.Enabled)
	setStr(&c.Monitors.ContainerRuntime.CRISocket, d.Monitors.ContainerRuntime.CRISocket)
	setDur(&c.Monitors.ContainerRuntime.CRITimeout, d.Monitors.ContainerRuntime.CRITimeout)
	setDur(&c.Monitors.ContainerRuntime.CheckInterval, d.Monitors.ContainerRuntime.CheckInterval)
	c.Monitors.Networking.fillDefaults(d.Monitors.Networking)
	c.Monitors.Storage.fillDefaults(d.Monitors.Storage)
	c.Monitors.Nvidia.AcceleratorMonitor.fillDefaults(d.Monitors.Nvidia.AcceleratorMonitor)
	c.Monitors.Nvidia.DCGM.fillDefaults(d.Monitors.Nvidia.DCGM)
	c.Monitors.Neuron.fillDefaults(d.Monitors.Neuron)
	c.Monitors.AMDGPU.fillDefaults(d.Monitors.AMDGPU)
	setBool(&c.Sources.Kmsg.Enabled, d.Sources.Kmsg.Enabled)
	setDur(&c.Sources.Kmsg.Lookback, d.Sources.Kmsg.Lookback)
	setStr(&c.Sources.Journal.Mode, d.Sources.Journal.Mode)
	setStr(&c.Sources.Journal.Directory, d.Sources.Journal.Directory)
	setStr(&c.Sources.Journal.File, d.Sources.Journal.File)
	setStr(&c.Sources.Journal.Command, d.Sources.Journal.Command)
	setDur(&c.Exporter.Heartbeat, d.Exporter.Heartbeat)
	setDur(&c.Exporter.Coalesce, d.Exporter.Coalesce)
}

func (m *AcceleratorMonitor) fillDefaults(d AcceleratorMonitor) {
	setBool(&m.Enabled, d.Enabled)
	setDur(&m.CheckInterval, d.CheckInterval)
	setStr(&m.ExpectedCountLabel, d.ExpectedCountLabel)
	setBool(&m.InstanceTypeTable, d.InstanceTypeTable)
}

func (m *DCGMConfig) fillDefaults(d DCGMConfig) {
	setStr(&m.Mode, d.Mode)
	setStr(&m.Dcgmi, d.Dcgmi)
	setDur(&m.CheckInterval, d.CheckInterval)
}

func (m *NetworkingMonitor) fillDefaults(d NetworkingMonitor) {
	setBool(&m.Enabled, d.Enabled)
	setDur(&m.CheckInterval, d.CheckInterval)
	setDur(&m.ProbeTimeout, d.ProbeTimeout)
	setStr(&m.DNSQueryName, d.DNSQueryName)
	setStr(&m.KubeProxyHealthz, d.KubeProxyHealthz)
}

func (m *StorageMonitor) fillDefaults(d StorageMonitor) {
	setBool(&m.Enabled, d.Enabled)
	setDur(&m.CheckInterval, d.CheckInterval)
	setDur(&m.ProbeTimeout, d.ProbeTimeout)
	setStr(&m.ProbeDir, d.ProbeDir)
	// Only an absent list takes the default: "filesystems: []" watches none.
	if m.Filesystems == nil {
		m.Filesystems = append([]string(nil), d.Filesystems...)
	}
}

func setBool(p **bool, d *bool) {
	if *p == nil {
		*p = d
	}
}

func setStr(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setDur(p *Duration, d Duration) {
	if p.Duration == 0 {
		*p = d
	}
}

// Validate checks the config against the registry.
func (c Config) Validate() error {
	var errs []error
	names := make([]string, 0, len(c.Reasons))
	for n := range c.Reasons {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		errs = append(errs, validateReasonOverride(name, c.Reasons[name])...)
	}
	for field, d := range map[string]Duration{
		"monitors.kernel.checkInterval":           c.Monitors.Kernel.CheckInterval,
		"monitors.containerRuntime.checkInterval": c.Monitors.ContainerRuntime.CheckInterval,
		"monitors.containerRuntime.criTimeout":    c.Monitors.ContainerRuntime.CRITimeout,
		"monitors.networking.checkInterval":       c.Monitors.Networking.CheckInterval,
		"monitors.networking.probeTimeout":        c.Monitors.Networking.ProbeTimeout,
		"monitors.storage.checkInterval":          c.Monitors.Storage.CheckInterval,
		"monitors.storage.probeTimeout":           c.Monitors.Storage.ProbeTimeout,
		"monitors.nvidia.checkInterval":           c.Monitors.Nvidia.CheckInterval,
		"monitors.nvidia.dcgm.checkInterval":      c.Monitors.Nvidia.DCGM.CheckInterval,
		"monitors.neuron.checkInterval":           c.Monitors.Neuron.CheckInterval,
		"monitors.amdgpu.checkInterval":           c.Monitors.AMDGPU.CheckInterval,
		"exporter.heartbeat":                      c.Exporter.Heartbeat,
	} {
		if d.Duration < time.Second {
			errs = append(errs, fmt.Errorf("%s: %v is below the 1s minimum", field, d.Duration))
		}
	}
	errs = append(errs, c.Monitors.Networking.validate()...)
	errs = append(errs, c.Monitors.Storage.validate()...)
	errs = append(errs, c.Monitors.Nvidia.DCGM.validate()...)
	if c.Exporter.Coalesce.Duration < 0 || c.Exporter.Coalesce.Duration > time.Second {
		errs = append(errs, fmt.Errorf("exporter.coalesce: %v must be between 0 and 1s", c.Exporter.Coalesce.Duration))
	}
	for field, n := range map[string]int{
		"monitors.nvidia.expectedCount": c.Monitors.Nvidia.ExpectedCount,
		"monitors.neuron.expectedCount": c.Monitors.Neuron.ExpectedCount,
		"monitors.amdgpu.expectedCount": c.Monitors.AMDGPU.ExpectedCount,
	} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s: %d must not be negative (0 = not configured)", field, n))
		}
	}
	switch c.Sources.Journal.Mode {
	case JournalCtl, JournalFile, JournalOff:
	default:
		errs = append(errs, fmt.Errorf("sources.journal.mode: %q is not journalctl, file or off", c.Sources.Journal.Mode))
	}
	for field, p := range map[string]string{
		"sources.journal.directory":           c.Sources.Journal.Directory,
		"sources.journal.file":                c.Sources.Journal.File,
		"monitors.containerRuntime.criSocket": c.Monitors.ContainerRuntime.CRISocket,
	} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s: %q must be an absolute path (it is read under the host root)", field, p))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// validateReasonOverride checks one entry of reasons: name is a reason or a
// family (docs/reasons.md), and each setting must make sense for the reason,
// or for at least one member of the family (the others ignore it): a severity
// may only be lowered, for every member.
func validateReasonOverride(name string, rc ReasonConfig) []error {
	members, ok := health.Expand(name)
	if !ok {
		return []error{fmt.Errorf("reasons.%s: unknown reason or family (see docs/reasons.md)", name)}
	}
	var rs []health.Reason
	for _, m := range members {
		r, _ := health.LookupReason(m)
		rs = append(rs, r)
	}
	family := len(members) > 1 || members[0] != name
	var errs []error
	if rc.Severity != "" {
		s := health.Severity(rc.Severity)
		if !s.Valid() {
			errs = append(errs, fmt.Errorf("reasons.%s.severity: %q is not Fatal, Warning or Info", name, rc.Severity))
		} else if i := slices.IndexFunc(rs, func(r health.Reason) bool { return !s.AtMost(r.Severity) }); i >= 0 {
			from := string(rs[i].Severity)
			if len(rs) > 1 {
				from += " (" + rs[i].Name + ")"
			}
			errs = append(errs, fmt.Errorf("reasons.%s.severity: may only be lowered from %s, not raised to %s", name, from, s))
		}
	}
	if rc.QuietPeriod != nil {
		switch {
		case !slices.ContainsFunc(rs, func(r health.Reason) bool { return r.Source == health.FromLog }):
			why := "this one recovers when its check passes"
			if family {
				why = "no member of this family is log-derived"
			}
			errs = append(errs, fmt.Errorf("reasons.%s.quietPeriod: only log-derived reasons have a quiet period; %s", name, why))
		case rc.QuietPeriod.Duration < time.Second:
			errs = append(errs, fmt.Errorf("reasons.%s.quietPeriod: %v is below the 1s minimum", name, rc.QuietPeriod.Duration))
		}
	}
	if rc.Threshold != nil {
		i := slices.IndexFunc(rs, func(r health.Reason) bool { return r.Threshold != nil })
		switch {
		case i < 0 && family:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: no member of this family has a threshold", name))
		case i < 0:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: this reason has no threshold", name))
		case *rc.Threshold <= 0:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: must be positive (unit: %s)", name, rs[i].Threshold.Unit))
		}
	}
	return errs
}

func (m NetworkingMonitor) validate() []error {
	var errs []error
	if m.ProbeTimeout.Duration > m.CheckInterval.Duration {
		errs = append(errs, fmt.Errorf("monitors.networking.probeTimeout: %v is longer than checkInterval %v", m.ProbeTimeout.Duration, m.CheckInterval.Duration))
	}
	if m.ExcludeInterfaces != "" {
		if _, err := regexp.Compile(m.ExcludeInterfaces); err != nil {
			errs = append(errs, fmt.Errorf("monitors.networking.excludeInterfaces: %w", err))
		}
	}
	if m.NetNS != "" && !filepath.IsAbs(m.NetNS) {
		errs = append(errs, fmt.Errorf("monitors.networking.netns: %q must be an absolute path (it is read under the host root)", m.NetNS))
	}
	if m.DNSServer != "" && !validHostPort(m.DNSServer, false) {
		errs = append(errs, fmt.Errorf("monitors.networking.dnsServer: %q is not host or host:port", m.DNSServer))
	}
	if !validHostPort(m.KubeProxyHealthz, true) {
		errs = append(errs, fmt.Errorf("monitors.networking.kubeProxyHealthz: %q is not host:port", m.KubeProxyHealthz))
	}
	return errs
}

// validHostPort reports whether s is "host:port" (or a bare host when the
// port is optional), with a port in 1-65535.
func validHostPort(s string, needPort bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if needPort {
			return false
		}
		host, port = strings.Trim(s, "[]"), ""
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return false
	}
	if port == "" {
		return !needPort
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

func (m DCGMConfig) validate() []error {
	var errs []error
	switch m.Mode {
	case DCGMAuto, DCGMRequired, DCGMOff:
	default:
		errs = append(errs, fmt.Errorf("monitors.nvidia.dcgm.mode: %q is not auto, required or off", m.Mode))
	}
	// Both end up as arguments of a command: an option-like value would be
	// read as another option.
	if strings.HasPrefix(m.Dcgmi, "-") || strings.ContainsAny(m.Dcgmi, " \t\n") ||
		(strings.Contains(m.Dcgmi, "/") && !filepath.IsAbs(m.Dcgmi)) {
		errs = append(errs, fmt.Errorf("monitors.nvidia.dcgm.dcgmi: %q must be a command name or an absolute path", m.Dcgmi))
	}
	if h := m.HostEngine; h != "" {
		if strings.HasPrefix(h, "unix://") {
			if !filepath.IsAbs(strings.TrimPrefix(h, "unix://")) {
				errs = append(errs, fmt.Errorf("monitors.nvidia.dcgm.hostEngine: %q must be unix:// followed by an absolute socket path", h))
			}
		} else if strings.HasPrefix(h, "-") || !validHostPort(h, false) {
			errs = append(errs, fmt.Errorf("monitors.nvidia.dcgm.hostEngine: %q is not host, host:port or unix:///path", h))
		}
	}
	return errs
}

func (m StorageMonitor) validate() []error {
	var errs []error
	if m.ProbeTimeout.Duration > m.CheckInterval.Duration {
		errs = append(errs, fmt.Errorf("monitors.storage.probeTimeout: %v is longer than checkInterval %v", m.ProbeTimeout.Duration, m.CheckInterval.Duration))
	}
	for i, p := range m.Filesystems {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("monitors.storage.filesystems[%d]: %q must be an absolute path (it is read under the host root)", i, p))
		}
	}
	if !filepath.IsAbs(m.ProbeDir) || filepath.Clean(m.ProbeDir) == "/" {
		errs = append(errs, fmt.Errorf("monitors.storage.probeDir: %q must be an absolute path of a directory the agent owns, not /", m.ProbeDir))
	}
	return errs
}

// MonitorEnabled reports whether the named registry monitor is on.
func (c Config) MonitorEnabled(name string) bool {
	switch name {
	case "kernel":
		return *c.Monitors.Kernel.Enabled
	case "containerRuntime":
		return *c.Monitors.ContainerRuntime.Enabled
	case "networking":
		return *c.Monitors.Networking.Enabled
	case "storage":
		return *c.Monitors.Storage.Enabled
	case "nvidia":
		return *c.Monitors.Nvidia.Enabled
	case "neuron":
		return *c.Monitors.Neuron.Enabled
	case "amdgpu":
		return *c.Monitors.AMDGPU.Enabled
	}
	return false
}

// Effective returns the registry entry of a reason with the config's
// overrides applied, and false when the reason is disabled or unknown. The
// overrides of the families the reason belongs to apply first; the reason's
// own entry, field by field, takes precedence.
func (c Config) Effective(name string) (health.Reason, bool) {
	r, ok := health.LookupReason(name)
	if !ok {
		return r, false
	}
	registered := r.Severity
	for _, rc := range c.overridesOf(name) {
		if rc.Disabled {
			return r, false
		}
		if rc.Severity != "" && health.Severity(rc.Severity).AtMost(registered) {
			r.Severity = health.Severity(rc.Severity)
		}
		if rc.QuietPeriod != nil && r.Source == health.FromLog {
			r.QuietPeriod = rc.QuietPeriod.Duration
		}
		if rc.Threshold != nil && r.Threshold != nil {
			t := *r.Threshold
			t.Default = *rc.Threshold
			r.Threshold = &t
		}
	}
	return r, true
}

// overridesOf returns the overrides that apply to a reason, least specific
// first: its families' (in registry order), then its own.
func (c Config) overridesOf(name string) []ReasonConfig {
	var out []ReasonConfig
	for _, f := range health.FamiliesOf(name) {
		if rc, ok := c.Reasons[f]; ok && f != name {
			out = append(out, rc)
		}
	}
	if rc, ok := c.Reasons[name]; ok {
		out = append(out, rc)
	}
	return out
}

// Threshold returns the effective threshold of a reason (0 when it has none).
func (c Config) Threshold(name string) float64 {
	if r, ok := c.Effective(name); ok && r.Threshold != nil {
		return r.Threshold.Default
	}
	if r, ok := health.LookupReason(name); ok && r.Threshold != nil {
		return r.Threshold.Default
	}
	return 0
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}
