// Package monitors is the table of nodemend-agent's monitors: for each, its
// registry name (pkg/health), its config section (monitors.<name>, a type of
// the monitor's own package) and how it is built. It is the one place that
// lists every monitor; the agent, the config file, its generated reference
// (docs/configuration.md) and the chart's checks all read it.
//
// Adding a monitor: write its package under pkg/monitors (rules, checks, a
// Config with DefaultConfig and Validate), add its reasons and monitor to
// pkg/health/reasons.yaml, add one line to Table, then `make generate` and the
// chart's agent.config values and schema (deploy/deploytest says what is
// missing).
package monitors

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/amdgpu"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/networking"
	"nodemend.dev/nodemend/pkg/monitors/neuron"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/nvmllib"
	"nodemend.dev/nodemend/pkg/monitors/storage"
)

// Hosts are the monitors' interfaces to the host's hardware and kernel that
// tests and the simulation replace; a nil one is the real host's.
type Hosts struct {
	// NVML opens the NVIDIA management library; nil means the real library
	// (pkg/monitors/nvidia/nvmllib).
	NVML nvidia.Opener
	// Timex replaces adjtimex(2) for the clock check; nil is the real one.
	Timex kernel.TimexReader
}

// Deps are what the agent hands the monitors besides detection.Env: facts of
// the node, and the host interfaces that tests and the simulation replace.
type Deps struct {
	Hosts
	// NodeName is this node.
	NodeName string
	// Pods lists this node's pods (from the agent's informer).
	Pods containerruntime.PodLister
	// NodeLabels serves this node's labels from a cache.
	NodeLabels accel.NodeLabels
	// DCGM returns the DCGM source for the nvidia monitor's dcgm settings
	// (nil: none); the agent keeps one across reloads while they stay.
	DCGM func(dcgm.Config) *dcgm.Source
	// CloudEvents reads the events the cloud scheduled for the instance
	// (internal/cloudmeta); nil leaves the kernel monitor's cloud check out.
	CloudEvents func(context.Context) ([]cloudmeta.Event, error)
}

// Table lists every monitor, in the order of the config file and its
// reference. The accelerator monitors share AcceleratedHardwareReady and run
// only where their hardware is (detection.Applier).
func Table() []Kind {
	return []Kind{
		define("kernel", kernel.DefaultConfig, func(env detection.Env, d Deps, c kernel.Config) detection.Monitor {
			o := c.Options()
			o.Timex = d.Timex
			o.CloudEvents = d.CloudEvents
			return kernel.New(env, o)
		}),
		define("containerRuntime", containerruntime.DefaultConfig, func(env detection.Env, d Deps, c containerruntime.Config) detection.Monitor {
			return containerruntime.New(env, c.Options(d.NodeName, d.Pods))
		}),
		define("networking", networking.DefaultConfig, func(env detection.Env, d Deps, c networking.Config) detection.Monitor {
			var pods networking.PodLister
			if d.Pods != nil {
				pods = networking.PodLister(d.Pods)
			}
			return networking.New(env, c.Options(pods))
		}),
		define("storage", storage.DefaultConfig, func(env detection.Env, _ Deps, c storage.Config) detection.Monitor {
			return storage.New(env, c.Options())
		}),
		define("nvidia", nvidia.DefaultConfig, func(env detection.Env, d Deps, c nvidia.Config) detection.Monitor {
			var src *dcgm.Source
			if d.DCGM != nil {
				src = d.DCGM(c.DCGM)
			}
			nvml := d.NVML
			if nvml == nil {
				nvml = nvmllib.Open
			}
			return nvidia.New(env, c.Options(nvml, d.NodeLabels, src))
		}),
		define("neuron", neuron.DefaultConfig, func(env detection.Env, d Deps, c accel.Config) detection.Monitor {
			return neuron.New(env, neuron.OptionsFor(c, d.NodeLabels))
		}),
		define("amdgpu", amdgpu.DefaultConfig, func(env detection.Env, d Deps, c accel.Config) detection.Monitor {
			return amdgpu.New(env, amdgpu.OptionsFor(c, d.NodeLabels))
		}),
	}
}

// Kind is one monitor of the table.
type Kind struct {
	// Name is the registry monitor name (pkg/health) and the section's key.
	Name    string
	section reflect.Type
	def     func() detection.Config
	decode  func([]byte) (detection.Config, error)
	build   func(detection.Env, Deps, detection.Config) detection.Monitor
}

func define[C detection.Config](name string, def func() C, build func(detection.Env, Deps, C) detection.Monitor) Kind {
	return Kind{
		Name:    name,
		section: reflect.TypeFor[C](),
		def:     func() detection.Config { return def() },
		decode: func(raw []byte) (detection.Config, error) {
			var c C
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				return nil, err
			}
			detection.FillDefaults(&c, def())
			return c, nil
		},
		build: func(env detection.Env, d Deps, c detection.Config) detection.Monitor { return build(env, d, c.(C)) },
	}
}

// Default is the section used when the file has none.
func (k Kind) Default() detection.Config { return k.def() }

// Decode reads a section strictly (unknown keys are errors) and fills in the
// keys it leaves out from Default. It does not validate.
func (k Kind) Decode(raw []byte) (detection.Config, error) { return k.decode(raw) }

// Section is the section's Go type, for generated docs and schema checks.
func (k Kind) Section() reflect.Type { return k.section }

// New builds the monitor from its section. The section must be of the
// kind's type (one Decode or Default returned).
func (k Kind) New(env detection.Env, d Deps, c detection.Config) detection.Monitor {
	return k.build(env, d, c)
}
