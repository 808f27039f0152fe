package accel

import (
	"fmt"

	"nodemend.dev/nodemend/pkg/detection"
)

// Config configures an accelerator monitor (nvidia, neuron, amdgpu →
// AcceleratedHardwareReady). An enabled monitor still runs only on nodes
// that have its hardware; elsewhere it writes nothing.
type Config struct {
	detection.Switch `json:",inline"`
	// CheckInterval is the period of the device checks.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
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

// DefaultConfig is an accelerator section with the expected-count label
// its monitor documents.
func DefaultConfig(label string) Config {
	on := true
	return Config{Switch: detection.Enabled(), CheckInterval: detection.Seconds(30), ExpectedCountLabel: label, InstanceTypeTable: &on}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	errs := detection.Errors(detection.MinPeriod(path+".checkInterval", c.CheckInterval))
	if c.ExpectedCount < 0 {
		errs = append(errs, fmt.Errorf("%s.expectedCount: %d must not be negative (0 = not configured)", path, c.ExpectedCount))
	}
	return errs
}

// Expect is where the section says the expected device count comes from;
// table is the vendor's instance-type table.
func (c Config) Expect(table func() map[string]int) ExpectOptions {
	o := ExpectOptions{Count: c.ExpectedCount, Label: c.ExpectedCountLabel}
	if c.InstanceTypeTable != nil && *c.InstanceTypeTable {
		o.Table = table()
	}
	return o
}
