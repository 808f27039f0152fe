package kernel

import "nodemend.dev/nodemend/pkg/monitor"

// Config configures the kernel monitor (KernelReady).
type Config struct {
	monitor.Switch `json:",inline"`
	// CheckInterval is the period of the /proc checks (pid, file, zombie, clock).
	CheckInterval monitor.Duration `json:"checkInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Switch: monitor.Enabled(), CheckInterval: monitor.Seconds(30)}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	return monitor.Errors(monitor.MinPeriod(path+".checkInterval", c.CheckInterval))
}

// Options are the monitor's options for the section; the zombie scan reads
// every process, so it runs at half the rate of the other checks.
func (c Config) Options() Options {
	p := c.CheckInterval.Duration
	return Options{LimitsPeriod: p, ZombiePeriod: 2 * p, ClockPeriod: p}
}
