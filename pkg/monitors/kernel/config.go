package kernel

import "nodemend.dev/nodemend/pkg/detection"

// Config configures the kernel monitor (KernelReady).
type Config struct {
	detection.Switch `json:",inline"`
	// CheckInterval is the period of the /proc checks (pid and open-file
	// limits, clock synchronization) and of the cloud's scheduled events,
	// often enough to tell a spot interruption, which comes two minutes
	// ahead, in time. The zombie scan reads every process, so it runs at
	// twice this period.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
	// EnvironInterval is the period of the environment size scan: long,
	// because it reads every process's environment and what it finds
	// changes with deployments.
	EnvironInterval detection.Duration `json:"environInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Switch: detection.Enabled(), CheckInterval: detection.Seconds(30), EnvironInterval: detection.Seconds(300)}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	return detection.Errors(
		detection.MinPeriod(path+".checkInterval", c.CheckInterval),
		detection.MinPeriod(path+".environInterval", c.EnvironInterval),
	)
}

// Options are the monitor's options for the section, without the host
// interfaces (Timex, CloudEvents) the agent adds.
func (c Config) Options() Options {
	p := c.CheckInterval.Duration
	return Options{LimitsPeriod: p, ZombiePeriod: 2 * p, ClockPeriod: p, CloudEventsPeriod: p, EnvironPeriod: c.EnvironInterval.Duration}
}
