package nvidia

import (
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// Config configures the nvidia monitor.
type Config struct {
	accel.Config `json:",inline"`
	// NVMLLibrary is the libnvidia-ml file to load, in the agent's own
	// filesystem (not under the host root: the dynamic loader resolves it).
	// Empty means libnvidia-ml.so.1 from the loader's search path.
	NVMLLibrary string `json:"nvmlLibrary,omitempty"`
	// DCGM reads NVIDIA DCGM's health watches where a host engine runs.
	DCGM dcgm.Config `json:"dcgm"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Config: accel.DefaultConfig("nodemend.dev/expected-gpu-count"), DCGM: dcgm.DefaultConfig()}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	return append(c.Config.Validate(path), c.DCGM.Validate(path+".dcgm")...)
}

// Options are the monitor's options for the section: NVML opened by open,
// the expected count from the node's labels, DCGM read from src (nil: none).
func (c Config) Options(open Opener, labels accel.NodeLabels, src *dcgm.Source) Options {
	return Options{
		Open:        open,
		LibraryPath: c.NVMLLibrary,
		Expect:      c.Expect(accel.NvidiaGPUs),
		NodeLabels:  labels,
		CheckPeriod: c.CheckInterval.Duration,
		DCGM:        src,
		DCGMPeriod:  c.DCGM.CheckInterval.Duration,
	}
}
