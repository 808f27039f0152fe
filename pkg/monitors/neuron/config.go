package neuron

import "nodemend.dev/nodemend/pkg/monitors/accel"

// DefaultConfig is the neuron section used when the file leaves keys out;
// the section is the accelerator monitors' common one.
func DefaultConfig() accel.Config {
	return accel.DefaultConfig("nodemend.dev/expected-neuron-device-count")
}

// OptionsFor are the monitor's options for its section, the expected count
// from the node's labels.
func OptionsFor(c accel.Config, labels accel.NodeLabels) Options {
	return Options{Expect: c.Expect(accel.NeuronDevices), NodeLabels: labels, CheckPeriod: c.CheckInterval.Duration}
}
