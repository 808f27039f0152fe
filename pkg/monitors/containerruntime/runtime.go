// Package containerruntime is the containerRuntime monitor: it owns the
// ContainerRuntimeReady condition.
//
// Periodic checks talk to the container runtime over its CRI socket:
//   - ContainerRuntimeUnresponsive: Version, Status and ListPodSandbox fail or
//     time out for N consecutive checks.
//   - PodStuckTerminating: a pod of this node is past deletionTimestamp + N
//     seconds while the runtime still runs its containers or sandbox.
//
// Log rules read the systemd journal: runtime and kubelet unit failures, units
// that fail to start or restart in a loop, and kubelet probe failure rates.
//
// The package name shadows the standard library's; import it under another
// name (e.g. runtimemon).
package containerruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Name is the registry name of the monitor.
const Name = "containerRuntime"

// DefaultSocketPath is containerd's CRI socket, watched when none is
// configured.
const DefaultSocketPath = "/run/containerd/containerd.sock"

// PodLister returns the pods bound to this node, from the API server's cache
// (an informer on spec.nodeName). It must not block on the network.
type PodLister func() ([]*corev1.Pod, error)

// Options configure the monitor; Config.Options builds them from the config
// section. A zero timeout or period takes the one of DefaultConfig, the only
// place the defaults are written.
type Options struct {
	// SocketPath is the host path of the CRI socket, read under Env.HostRoot.
	// A "unix://" prefix (the kubelet's endpoint form) is accepted.
	//
	// Empty means DefaultSocketPath, and then the runtime is only expected once
	// the socket has been seen: until then a missing socket is not a fault (the
	// node may run another runtime, or containerd is still being installed) and
	// the check reports an error instead, keeping the condition as it is. A
	// configured path is expected from the start: a missing socket there counts
	// as a failed check, as it does for the default path once seen.
	SocketPath string
	// CallTimeout bounds each CRI call.
	CallTimeout time.Duration
	// ResponsivePeriod is the period of the ContainerRuntimeUnresponsive check.
	// Its threshold counts checks, so detection takes threshold × period.
	ResponsivePeriod time.Duration
	// StuckPodPeriod is the period of the PodStuckTerminating check.
	StuckPodPeriod time.Duration
	// DeprecationPeriod is the period of the containerd deprecation check.
	DeprecationPeriod time.Duration
	// NodeName is this node. Pods the lister returns that are bound elsewhere
	// are ignored; empty accepts every pod bound to some node.
	NodeName string
	// Pods lists this node's pods. Nil leaves out the PodStuckTerminating check.
	Pods PodLister
}

// Monitor is the containerRuntime monitor. Build it with New.
type Monitor struct {
	env      detection.Env
	clock    clock.PassiveClock
	opts     Options
	hostPath string // socket path as configured, for messages
	cri      *criClient
	checks   []detection.Check

	mu         sync.Mutex
	expected   bool // the runtime socket is expected to exist
	responsive responsiveness
	probes     map[string]*rateWindow // by reason
}

var _ detection.Monitor = (*Monitor)(nil)

// New builds the monitor. It does not connect to the runtime: that happens on
// the first check.
func New(env detection.Env, opts Options) *Monitor {
	if env.Clock == nil {
		env.Clock = clock.RealClock{}
	}
	configured := opts.SocketPath != ""
	if !configured {
		opts.SocketPath = DefaultSocketPath
	}
	opts.SocketPath = strings.TrimPrefix(opts.SocketPath, "unix://")
	detection.FillDefaults(&opts, DefaultConfig().Options("", nil))
	m := &Monitor{
		env:      env,
		clock:    env.Clock,
		opts:     opts,
		hostPath: opts.SocketPath,
		cri:      &criClient{path: filepath.Join(env.HostRoot, opts.SocketPath), timeout: opts.CallTimeout},
		expected: configured,
		probes:   map[string]*rateWindow{},
	}
	m.checks = []detection.Check{{
		Name:    "cri-responsive",
		Period:  opts.ResponsivePeriod,
		Reasons: []string{health.ReasonContainerRuntimeUnresponsive},
		Run:     m.checkResponsive,
	}, {
		Name:    "containerd-deprecations",
		Period:  opts.DeprecationPeriod,
		Reasons: []string{health.ReasonDeprecatedContainerdConfiguration},
		Run:     m.checkDeprecations,
	}}
	if opts.Pods != nil {
		m.checks = append(m.checks, detection.Check{
			Name:    "pods-stuck-terminating",
			Period:  opts.StuckPodPeriod,
			Reasons: []string{health.ReasonPodStuckTerminating},
			Run:     m.checkStuckPods,
		})
	}
	return m
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check { return m.checks }

// Close closes the CRI connection.
func (m *Monitor) Close() error { return m.cri.close() }

// errNotExpected is returned while the default socket has never been seen.
var errNotExpected = errors.New("container runtime not found")

// socketPresent reports whether the socket file exists, and marks the runtime
// expected from then on if it does.
func (m *Monitor) socketPresent() (present, expected bool) {
	_, err := os.Stat(m.cri.path)
	present = !errors.Is(err, fs.ErrNotExist)
	m.mu.Lock()
	defer m.mu.Unlock()
	if present {
		m.expected = true
	}
	return present, m.expected
}

func (m *Monitor) checkResponsive(ctx context.Context) ([]detection.Finding, error) {
	present, expected := m.socketPresent()
	if !present && !expected {
		return nil, fmt.Errorf("%w: no CRI socket at %s (not watching until it appears)", errNotExpected, m.hostPath)
	}
	p := probeResult{At: m.clock.Now()}
	if present {
		p.Err = m.cri.probe(ctx)
	} else {
		p.Err = fmt.Errorf("CRI socket %s is missing", m.hostPath)
		_ = m.cri.close() // a new socket will need a new connection
	}
	threshold := countThreshold(m.threshold(health.ReasonContainerRuntimeUnresponsive))
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.responsive, fs = evalUnresponsive(m.responsive, p, threshold, m.hostPath)
	return fs, nil
}

func (m *Monitor) checkStuckPods(ctx context.Context) ([]detection.Finding, error) {
	pods, err := m.opts.Pods()
	if err != nil {
		return nil, fmt.Errorf("listing this node's pods: %w", err)
	}
	now := m.clock.Now()
	threshold := secondsThreshold(m.threshold(health.ReasonPodStuckTerminating))
	overdue := overduePods(now, pods, m.opts.NodeName, threshold)
	if len(overdue) == 0 {
		return nil, nil // nothing can be stuck: no CRI call needed
	}
	if present, _ := m.socketPresent(); !present {
		return nil, fmt.Errorf("no CRI socket at %s", m.hostPath)
	}
	containers, err := m.cri.runningContainers(ctx)
	if err != nil {
		return nil, err
	}
	sandboxes, err := m.cri.readySandboxes(ctx)
	if err != nil {
		return nil, err
	}
	return evalStuck(now, threshold, overdue, runtimeUsage(containers, sandboxes)), nil
}

// threshold is the effective threshold of reason: Env.Threshold, else the
// registry default.
func (m *Monitor) threshold(reason string) float64 { return m.env.Threshold(reason) }

// countThreshold turns a count threshold into an int of at least 1.
func countThreshold(v float64) int {
	if math.IsNaN(v) || v < 1 {
		return 1
	}
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(v))
}

// secondsThreshold turns a threshold in seconds into a duration, at least 0.
func secondsThreshold(v float64) time.Duration {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	if v > math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(v * float64(time.Second))
}
