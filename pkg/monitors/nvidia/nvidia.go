// Package nvidia is the nvidia monitor: it owns AcceleratedHardwareReady on
// nodes with NVIDIA GPUs.
//
// Two independent paths detect faults:
//   - the kernel log: the driver's "NVRM: Xid (PCI:...): N, ..." lines, so
//     XIDs are caught without NVML or DCGM;
//   - NVML (through the Driver interface): an event set pushes XID critical
//     errors and double-bit ECC errors as they happen, and periodic checks
//     read device counts, ECC, row remapping, clocks event reasons, NVLink,
//     GPU fabric health and PCIe replays;
//   - DCGM, where a host engine runs (package dcgm): its health watches and
//     fields, read periodically. Never required.
//
// The monitor applies only to nodes with NVIDIA GPUs (/dev/nvidiaN device
// nodes, or an NVML that sees devices); elsewhere the agent does not run it
// and writes no AcceleratedHardwareReady for it. Every check splits into a
// gatherer and a pure evaluation function.
package nvidia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// Name is the registry monitor name.
const Name = "nvidia"

// Options tune the monitor; Config.Options builds them from the config
// section. A zero CheckPeriod takes DefaultConfig's.
type Options struct {
	// Open loads NVML; nil runs without NVML (kernel log and device nodes
	// only).
	Open Opener
	// LibraryPath is handed to Open; "" means libnvidia-ml.so.1 from the
	// dynamic loader's search path.
	LibraryPath string
	// Expect says how many GPUs the node should have.
	Expect accel.ExpectOptions
	// NodeLabels serves the node's labels for Expect.Label and the
	// instance-type table.
	NodeLabels accel.NodeLabels
	// CheckPeriod is the period of the checks.
	CheckPeriod time.Duration
	// DCGM reads DCGM's health watches; nil runs without DCGM. The source
	// outlives the monitor (it remembers whether a host engine answered).
	DCGM *dcgm.Source
	// DCGMPeriod is the period of the DCGM checks.
	DCGMPeriod time.Duration
}

// Monitor implements detection.Monitor for NVIDIA GPUs.
type Monitor struct {
	env  detection.Env
	opts Options

	mu     sync.Mutex
	drv    Driver
	closed bool
	// devices is per-device state of the health check, by UUID.
	devices map[string]deviceState
	// dbe folds the double-bit ECC reports of NVML and the kernel log.
	dbe dbeTracker
}

var (
	_ detection.Monitor  = (*Monitor)(nil)
	_ detection.Applier  = (*Monitor)(nil)
	_ detection.Streamer = (*Monitor)(nil)
)

// New builds the monitor. It loads nothing: NVML is opened on first use.
func New(env detection.Env, opts Options) *Monitor {
	env = env.WithDefaults()
	def := DefaultConfig()
	if opts.CheckPeriod <= 0 {
		opts.CheckPeriod = def.CheckInterval.Duration
	}
	if opts.DCGMPeriod <= 0 {
		opts.DCGMPeriod = def.DCGM.CheckInterval.Duration
	}
	return &Monitor{env: env, opts: opts, devices: map[string]deviceState{}}
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return Rules() }

// Interpret implements detection.Monitor.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	var out []detection.Finding
	for _, f := range interpret(match) {
		if f.reason == health.ReasonNvidiaXID48Error {
			f = m.dbe.xid48(f, f.subject, match.Line.Time)
		}
		out = append(out, detection.Finding{Reason: f.reason, Message: f.message, Subject: f.subject, Observed: match.Line.Time})
	}
	return out
}

// Applies implements detection.Applier: the node has NVIDIA GPU device nodes,
// or NVML loads and sees at least one GPU. A node without the driver (NVML
// fails to load) and without device nodes is not an NVIDIA node. NVML is
// opened here in either case, before the kernel log is read, so that an
// XID 48 replayed at start is already folded into NvidiaDoubleBitError
// where NVML reports double-bit errors (dbe.go).
func (m *Monitor) Applies(context.Context) bool {
	drv, err := m.driver()
	if nodes, nerr := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "nvidia"); nerr == nil && len(nodes) > 0 {
		return true
	}
	if err != nil {
		return false
	}
	devs, err := drv.Devices()
	return err == nil && len(devs) > 0
}

// driver opens NVML once; a failed open is retried on the next call (the
// driver may be installed after the agent starts, e.g. by the GPU operator).
func (m *Monitor) driver() (Driver, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drv != nil {
		return m.drv, nil
	}
	if m.closed {
		return nil, errors.New("nvidia monitor closed")
	}
	if m.opts.Open == nil {
		return nil, fmt.Errorf("%w: NVML is not configured in this agent", ErrNoDriver)
	}
	drv, err := m.opts.Open(m.opts.LibraryPath)
	if err != nil {
		return nil, err
	}
	m.drv = drv
	m.dbe.nvmlLoaded()
	return drv, nil
}

// Close releases NVML. Implements io.Closer: the agent closes the monitors
// of a replaced pipeline.
func (m *Monitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.drv == nil {
		return nil
	}
	err := m.drv.Close()
	m.drv = nil
	return err
}

// Stream implements detection.Streamer: NVML's event set pushes XID critical
// errors and double-bit ECC errors as they happen, without waiting for a
// check period.
func (m *Monitor) Stream(ctx context.Context, report func(detection.Finding)) error {
	drv, err := m.driver()
	if err != nil {
		return fmt.Errorf("NVML events: %w", err)
	}
	return drv.WatchEvents(ctx, func(ev Event) {
		if f, ok := eventFinding(ev); ok {
			observed := ev.Observed
			if observed.IsZero() {
				observed = m.env.Clock.Now()
			}
			switch {
			case ev.Kind == EventDoubleBitECC:
				m.dbe.event(ev.Device.PCI, observed)
			case f.reason == health.ReasonNvidiaXID48Error:
				f = m.dbe.xid48(f, ev.Device.PCI, observed)
			}
			report(detection.Finding{Reason: f.reason, Message: f.message, Subject: f.subject, Observed: observed})
		}
	})
}

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	p := m.opts.CheckPeriod
	checks := []detection.Check{
		{
			Name:    "nvidia-device-count",
			Period:  p,
			Reasons: []string{health.ReasonNvidiaDeviceCountMismatch},
			Run:     m.runDeviceCount,
		},
		{
			Name:   "nvidia-health",
			Period: p,
			Reasons: []string{
				health.ReasonNvidiaDoubleBitError, health.ReasonNvidiaPageRetirement, health.ReasonNvidiaRowRemapFailure,
				health.ReasonNvidiaThermalError, health.ReasonNvidiaPowerError, health.ReasonNvidiaNVLinkError,
				health.ReasonNvidiaFabricError, health.ReasonNvidiaFabricDegraded, health.ReasonNvidiaPCIeError,
			},
			Run: m.runHealth,
		},
		{
			Name:    "nvidia-fabric-manager",
			Period:  p,
			Reasons: []string{health.ReasonFabricManagerNotRunning},
			Run:     m.runFabricManager,
		},
	}
	if src := m.opts.DCGM; src != nil {
		checks = append(checks,
			detection.Check{Name: "nvidia-dcgm-health", Period: m.opts.DCGMPeriod, Reasons: dcgm.HealthReasons(),
				Run: m.dcgmCheck(src.CheckHealth)},
			detection.Check{Name: "nvidia-dcgm-fields", Period: m.opts.DCGMPeriod, Reasons: dcgm.FieldReasons(),
				Run: m.dcgmCheck(src.CheckFields)},
		)
	}
	return checks
}

// dcgmCheck adapts a DCGM source check to a monitor check.
func (m *Monitor) dcgmCheck(run func(context.Context) ([]dcgm.Finding, error)) func(context.Context) ([]detection.Finding, error) {
	return func(ctx context.Context) ([]detection.Finding, error) {
		fs, err := run(ctx)
		if err != nil || len(fs) == 0 {
			return nil, err
		}
		now := m.env.Clock.Now()
		out := make([]detection.Finding, 0, len(fs))
		for _, f := range fs {
			out = append(out, detection.Finding{Reason: f.Reason, Message: f.Message, Subject: f.Subject, Severity: f.Severity, Observed: now})
		}
		return out, nil
	}
}

func (m *Monitor) findings(specs []findingSpec) []detection.Finding {
	if len(specs) == 0 {
		return nil
	}
	now := m.env.Clock.Now()
	out := make([]detection.Finding, 0, len(specs))
	for _, f := range specs {
		out = append(out, detection.Finding{Reason: f.reason, Message: f.message, Subject: f.subject, Observed: now})
	}
	return out
}

func (m *Monitor) runDeviceCount(ctx context.Context) ([]detection.Finding, error) {
	nodes, err := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "nvidia")
	if err != nil {
		return nil, err
	}
	in := countInput{Nodes: nodes, Driver: -1}
	if drv, err := m.driver(); err == nil {
		devs, err := drv.Devices()
		if err != nil {
			// A driver that cannot even count its GPUs is itself the fault
			// the count check exists for; zero makes every GPU missing.
			in.Driver = 0
		} else {
			in.Driver = len(devs)
		}
	}
	in.Expected, in.ExpectedOK, err = accel.ResolveExpected(ctx, m.opts.Expect, m.opts.NodeLabels)
	if err != nil {
		return nil, err
	}
	return m.findings(evalDeviceCount(in)), nil
}

func (m *Monitor) runHealth(context.Context) ([]detection.Finding, error) {
	drv, err := m.driver()
	if err != nil {
		return nil, fmt.Errorf("NVML unavailable, GPU health fields not read: %w", err)
	}
	devs, err := drv.Devices()
	if err != nil {
		return nil, err
	}
	nvswitches, err := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "nvidia-nvswitch")
	if err != nil {
		return nil, err
	}
	threshold := m.env.Threshold(health.ReasonNvidiaPCIeError)
	var specs []findingSpec
	var errs []error
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range devs {
		s, err := drv.Sample(d.Index)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Name(), err))
			continue
		}
		if s.Taken.IsZero() {
			s.Taken = m.env.Clock.Now()
		}
		m.dbe.sampled(d.PCI, s.Field(FieldECCDBEVolatileTotal), s.Taken)
		fs, next := evalHealth(healthInput{Device: d, Sample: s, NVSwitch: len(nvswitches) > 0, ReplaysPerMinute: threshold,
			XID48: m.dbe.lastXID48(d.PCI)}, m.devices[d.UUID])
		m.devices[d.UUID] = next
		specs = append(specs, fs...)
	}
	if len(errs) > 0 && len(errs) == len(devs) {
		return nil, errors.Join(errs...)
	}
	return m.findings(specs), nil
}

func (m *Monitor) runFabricManager(context.Context) ([]detection.Finding, error) {
	nvswitches, err := accel.DeviceNodes(accel.DevDir(m.env.HostRoot), "nvidia-nvswitch")
	if err != nil {
		return nil, err
	}
	if len(nvswitches) == 0 {
		return nil, nil
	}
	running, err := processRunning(filepath.Join(m.env.HostRoot, "proc"), "nv-fabricmanager")
	if err != nil {
		return nil, err
	}
	return m.findings(evalFabricManager(len(nvswitches), running)), nil
}

// processRunning reports whether a process whose comm is name exists under
// the proc directory.
func processRunning(procDir, name string) (bool, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if strings.Trim(e.Name(), "0123456789") != "" {
			continue // not a process directory
		}
		comm, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil {
			continue // the process exited
		}
		if strings.TrimSpace(string(comm)) == name {
			return true, nil
		}
	}
	return false, nil
}
