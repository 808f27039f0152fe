package kernel

import "nodemend.dev/nodemend/pkg/monitor"

// Config configures the kernel monitor (KernelReady).
type Config struct {
	monitor.Switch `json:",inline"`
	// CheckInterval is the period of the /proc checks (pid and open-file
	// limits, clock synchronization) and of the cloud's scheduled events,
	// often enough to tell a spot interruption, which comes two minutes
	// ahead, in time. The zombie scan reads every process, so it runs at
	// twice this period.
	CheckInterval monitor.Duration `json:"checkInterval,omitempty"`
	// EnvironInterval is the period of the environment size scan: long,
	// because it reads every process's environment and what it finds
	// changes with deployments.
	EnvironInterval monitor.Duration `json:"environInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Switch: monitor.Enabled(), CheckInterval: monitor.Seconds(30), EnvironInterval: monitor.Seconds(300)}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	return monitor.Errors(
		monitor.MinPeriod(path+".checkInterval", c.CheckInterval),
		monitor.MinPeriod(path+".environInterval", c.EnvironInterval),
	)
}

// Options are the monitor's options for the section, without the host
// interfaces (Timex, CloudEvents) the agent adds.
func (c Config) Options() Options {
	p := c.CheckInterval.Duration
	return Options{LimitsPeriod: p, ZombiePeriod: 2 * p, ClockPeriod: p, CloudEventsPeriod: p, EnvironPeriod: c.EnvironInterval.Duration}
}
