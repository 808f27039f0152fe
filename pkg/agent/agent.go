// Package agent wires nodemend-agent together: config → monitors → (log
// sources + rule matcher, scheduler of checks) → exporter → Kubernetes API.
//
// One file per job:
//   - agent.go: options, start and stop (Run)
//   - pipeline.go: the config-derived pipeline, built and swapped in on
//     every config load or applicability change (applyConfig)
//   - lines.go: a log line through the matcher to the exporter (handleLine)
//   - checks.go: periodic checks run by the scheduler, and problems reported
//     once until they clear (reportOnce)
//   - sources.go: log readers and monitor streams, restarted with backoff
//   - applies.go: which monitors apply to this node, re-checked over time
//   - monitors.go: the monitors built from the table (pkg/monitors) and
//     their node-label cache
//   - boot.go, pods.go: what monitors and the exporter are given
//   - diagnostics.go, remediation.go: the NodeDiagnostic and
//     NodeRemediation runners beside the pipeline; gpudiagnostics.go: the
//     NodeDiagnostics' GPU diagnostics, run by the nvidia monitor's DCGM
//     keeper (pkg/monitors/nvidia/dcgm)
package agent

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/pkg/agent/events"
	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/agent/scheduler"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// Options configure an agent.
type Options struct {
	// Client is the agent's core/v1 client (internal/coreclient).
	Client *coreclient.Client
	// StatusClient writes the node's conditions; nil means Client. A client
	// of its own (its own rate limit) keeps a burst of Events and pod reads
	// from delaying a condition: conditions are what the controller acts on.
	StatusClient *coreclient.Client
	NodeName     string
	// HostRoot prefixes every host path ("/" in production).
	HostRoot string
	// ConfigPath is the config file; empty runs with the defaults.
	ConfigPath string
	// ConfigPoll is the fallback poll period of the config file (default 10s).
	ConfigPoll time.Duration
	// MetricsAddr serves /metrics, /healthz and /readyz; empty disables it.
	MetricsAddr string
	Log         logr.Logger
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Metrics defaults to a fresh set.
	Metrics *metrics.Agent
	// Hosts replace the monitors' interfaces to the host's hardware and
	// kernel (NVML, adjtimex) in tests and simulations; nil ones are the
	// real host's.
	Hosts monitors.Hosts
	// Commands runs the host tools of the monitors (DCGM's dcgmi) from the
	// agent's own filesystem; nil means real processes. Tests script them.
	Commands command.Runner
	// HostCommands runs tools of the host's filesystem inside it (the
	// host's dcgmi, where the agent's image has none); nil means real
	// processes chrooted into HostRoot, or none when HostRoot is "/" (the
	// agent's filesystem is the host's).
	HostCommands command.Runner
	// AppliesPoll is how often monitors of hardware a node may lack (GPUs)
	// re-check whether they apply (default 1m): a driver installed after the
	// agent starts is picked up.
	AppliesPoll time.Duration
	// Diagnostics serves this node's NodeDiagnostics (pkg/diagnostics) when
	// its Config is set; see diagnostics.go.
	Diagnostics DiagnosticsOptions
	// Remediation carries out this node's NodeRemediations when its Config
	// is set; see remediation.go.
	Remediation RemediationOptions
	// Cloud reads the instance's metadata service: the scheduled events
	// of the kernel monitor's cloud check, and the bundles' instance
	// metadata. Nil reads none (cmd/nodemend-agent builds it from
	// --cloud-metadata).
	Cloud cloudmeta.Provider
}

// Agent is a running nodemend-agent.
type Agent struct {
	opts     Options
	metrics  *metrics.Agent
	exporter *exporter.Exporter
	recorder *events.Recorder
	sched    *scheduler.Scheduler
	pods     podCache

	// pipeline is the config-derived state, swapped whole on reload
	// (pipeline.go) and read under mu by every line (lines.go), check
	// (checks.go) and applicability poll (applies.go).
	mu       sync.Mutex
	pipeline *pipeline
	// interpretMu serializes Interpret (lines.go): monitors keep windows and
	// counters.
	interpretMu sync.Mutex
	// applyMu serializes pipeline rebuilds (pipeline.go: config reloads and
	// applicability changes).
	applyMu sync.Mutex

	errOnce reportOnce

	// dcgm keeps the DCGM source across pipeline rebuilds while its
	// settings stay (it remembers whether a host engine has answered), and
	// runs requested GPU diagnostics.
	dcgm *dcgm.Keeper

	// promos count the repetitions of promoted reasons (custom.go).
	promos promotions
	// fileRefusals are the custom rules' files reported untrusted.
	fileRefusals sync.Map
}

// New validates opts and builds an agent.
func New(opts Options) (*Agent, error) {
	if opts.Client == nil || opts.NodeName == "" {
		return nil, errors.New("agent: a Kubernetes client and a node name are required")
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.ConfigPoll <= 0 {
		opts.ConfigPoll = 10 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewAgent()
	}
	if opts.Commands == nil {
		opts.Commands = command.Exec{}
	}
	if opts.HostCommands == nil && filepath.Clean(opts.HostRoot) != "/" {
		opts.HostCommands = command.Exec{Root: opts.HostRoot}
	}
	if opts.AppliesPoll <= 0 {
		opts.AppliesPoll = time.Minute
	}
	a := &Agent{opts: opts, metrics: opts.Metrics}
	a.dcgm = &dcgm.Keeper{Runner: opts.Commands, HostRunner: opts.HostCommands, Log: opts.Log.WithName("dcgm")}
	a.errOnce.log, a.errOnce.metrics = opts.Log, opts.Metrics
	return a, nil
}

// Run runs the agent until ctx ends. It fails at start when the config file
// is invalid: a node agent silently running other settings than its operator
// wrote is worse than one that visibly does not start. Later invalid edits are
// rejected and the last good config stays in force.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := a.opts.Log

	// One rate limit per reason and node: a storm of one reason is
	// throttled without starving the others.
	a.recorder = events.New(events.Options{
		Sink: a.opts.Client, Source: corev1.EventSource{Component: "nodemend-agent", Host: a.opts.NodeName},
		Clock: a.opts.Clock, Log: log.WithName("events"),
	})
	a.errOnce.untrusted = a.toolRefused

	var server *metrics.Server
	if a.opts.MetricsAddr != "" {
		server = metrics.NewServer(a.opts.MetricsAddr, a.metrics)
		go func() {
			if err := server.Run(ctx); err != nil {
				log.Error(err, "metrics server stopped")
			}
		}()
	}

	boot := &bootRecord{hostRoot: a.opts.HostRoot}
	earlier, err := boot.earlierBoot()
	if err != nil {
		log.Error(err, "cannot tell whether the host rebooted; keeping the faults found on the node")
	}
	status := a.opts.StatusClient
	if status == nil {
		status = a.opts.Client
	}
	a.exporter = exporter.New(exporter.Options{
		Client: status, NodeName: a.opts.NodeName, Clock: a.opts.Clock,
		Recorder: a.recorder, Metrics: a.metrics, Log: log.WithName("exporter"),
		EarlierBoot: earlier,
	})
	a.sched = scheduler.New(scheduler.Options{
		Clock:  a.opts.Clock,
		OnLag:  func(_ string, lag time.Duration) { a.metrics.SchedulerLag(lag) },
		OnSkip: a.metrics.SchedulerSkip,
	})
	a.pods = newPodCache(ctx, a.opts.Client, a.opts.NodeName)

	// The first config must be valid.
	if err := a.loadConfig(ctx); err != nil {
		return err
	}

	if err := a.exporter.Start(ctx); err != nil {
		return err
	}
	if earlier {
		log.Info("the host rebooted since the conditions were written; dropped the log-derived faults of the earlier boot", "boot", boot.current)
	}
	if err := boot.record(); err != nil {
		log.Error(err, "recording the boot; a reboot will not be recognized at the next start")
	}
	if server != nil {
		server.SetReady()
	}
	log.Info("agent started", "hostRoot", a.opts.HostRoot) // the logger names the node

	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); a.recorder.Run(ctx) }()
	go func() { defer wg.Done(); _ = a.exporter.Run(ctx) }()
	go func() { defer wg.Done(); _ = a.sched.Run(ctx) }()
	go func() { defer wg.Done(); a.watchApplicability(ctx) }()
	a.startDiagnostics(ctx, &wg)
	a.startRemediation(ctx, &wg)
	<-ctx.Done()
	a.applyMu.Lock()
	a.mu.Lock()
	if a.pipeline != nil {
		a.pipeline.stop()
		a.pipeline.release()
	}
	a.mu.Unlock()
	a.applyMu.Unlock()
	wg.Wait()
	return nil
}
