package containerruntime

import "nodemend.dev/nodemend/pkg/detection"

// Config configures the container runtime monitor (ContainerRuntimeReady).
type Config struct {
	detection.Switch `json:",inline"`
	// CRISocket is the runtime's CRI socket, under the host root. Empty means
	// containerd's default socket, expected only once it has been seen (a node
	// running another runtime is not faulty); a path set here is expected
	// from the start.
	CRISocket string `json:"criSocket,omitempty"`
	// CRITimeout bounds each CRI call.
	CRITimeout detection.Duration `json:"criTimeout,omitempty"`
	// CheckInterval is the period of the CRI checks (the runtime answers,
	// no pod stuck terminating). The unresponsive check's threshold counts
	// checks, so detection takes threshold × this period.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
	// DeprecationInterval is the period of the check of containerd's
	// deprecation warnings: they change only with its config or version.
	DeprecationInterval detection.Duration `json:"deprecationInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Switch: detection.Enabled(), CRITimeout: detection.Seconds(2), CheckInterval: detection.Seconds(15),
		DeprecationInterval: detection.Seconds(600)}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	return detection.Errors(
		detection.MinPeriod(path+".checkInterval", c.CheckInterval),
		detection.MinPeriod(path+".criTimeout", c.CRITimeout),
		detection.MinPeriod(path+".deprecationInterval", c.DeprecationInterval),
		detection.AbsolutePath(path+".criSocket", c.CRISocket),
	)
}

// Options are the monitor's options for the section, on this node with
// these pods.
func (c Config) Options(node string, pods PodLister) Options {
	return Options{
		SocketPath:        c.CRISocket,
		CallTimeout:       c.CRITimeout.Duration,
		ResponsivePeriod:  c.CheckInterval.Duration,
		StuckPodPeriod:    c.CheckInterval.Duration,
		DeprecationPeriod: c.DeprecationInterval.Duration,
		NodeName:          node,
		Pods:              pods,
	}
}
