// Package agent wires nodemend-agent together: config → monitors → (log
// sources + rule matcher, scheduler of checks) → exporter → Kubernetes API.
package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/agent/events"
	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/agent/scheduler"
	"nodemend.dev/nodemend/pkg/diagnostics/command"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitor"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/nvmllib"
	"nodemend.dev/nodemend/pkg/rules"
)

// Options configure an agent.
type Options struct {
	// Client is the agent's core/v1 client (internal/coreclient).
	Client   *coreclient.Client
	NodeName string
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
	// Timex replaces adjtimex(2) for the clock check (simulations, tests).
	Timex kernel.TimexReader
	// Metrics defaults to a fresh set.
	Metrics *metrics.Agent
	// NVML opens the NVIDIA management library for the nvidia monitor; nil
	// means the real library (pkg/monitors/nvidia/nvmllib). Tests inject a fake.
	NVML nvidia.Opener
	// Commands runs the host tools of the monitors (DCGM's dcgmi) from the
	// agent's own filesystem; nil means real processes. Tests script them.
	Commands dcgm.Runner
	// HostCommands runs tools of the host's filesystem inside it (the
	// host's dcgmi, where the agent's image has none); nil means real
	// processes chrooted into HostRoot, or none when HostRoot is "/" (the
	// agent's filesystem is the host's).
	HostCommands dcgm.Runner
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
}

// Agent is a running nodemend-agent.
type Agent struct {
	opts     Options
	metrics  *metrics.Agent
	exporter *exporter.Exporter
	recorder *events.Recorder
	sched    *scheduler.Scheduler
	pods     podCache

	// pipeline is the config-derived state, swapped whole on reload.
	mu       sync.Mutex
	pipeline *pipeline
	// interpretMu serializes Interpret: monitors keep windows and counters.
	interpretMu sync.Mutex
	// applyMu serializes pipeline rebuilds (config reloads and
	// applicability changes).
	applyMu sync.Mutex

	errOnce reportOnce

	// dcgm is the DCGM source, kept across pipeline rebuilds while its
	// settings stay: it remembers whether a host engine has answered.
	dcgmMu sync.Mutex
	dcgm   *dcgmSource
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
	if opts.NVML == nil {
		opts.NVML = nvmllib.Open
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
	a.exporter = exporter.New(exporter.Options{
		Client: a.opts.Client, NodeName: a.opts.NodeName, Clock: a.opts.Clock,
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

// loadConfig applies the first config and, when there is a file, keeps
// watching it. Without a file the defaults apply and nothing is watched.
func (a *Agent) loadConfig(ctx context.Context) error {
	if a.opts.ConfigPath == "" {
		return a.applyConfig(ctx, config.Default(), nil)
	}
	first := make(chan error, 1)
	var loaded atomic.Bool
	go config.Watch(ctx, a.opts.ConfigPath, a.opts.ConfigPoll, func(c config.Config, err error) {
		err = a.applyConfig(ctx, c, err)
		if !loaded.Swap(true) {
			first <- err
		}
	})
	return <-first
}

// applyConfig builds a new pipeline from c and swaps it in. On error the
// current pipeline stays.
func (a *Agent) applyConfig(ctx context.Context, c config.Config, loadErr error) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	if loadErr != nil {
		a.metrics.ConfigReload(false)
		a.mu.Lock()
		running := a.pipeline != nil
		a.mu.Unlock()
		if running {
			a.opts.Log.Error(loadErr, "rejected new agent config; the last good config stays in force", "path", a.opts.ConfigPath)
			a.recorder.Event(a.exporter.NodeRef(), corev1.EventTypeWarning, "InvalidAgentConfig", health.BoundMessage(
				fmt.Sprintf("nodemend-agent rejected %s and keeps its last good config: %v", a.opts.ConfigPath, loadErr)))
		}
		return loadErr
	}
	p, err := a.buildPipeline(ctx, c)
	if err != nil {
		a.metrics.ConfigReload(false)
		return err
	}
	a.mu.Lock()
	old := a.pipeline
	a.pipeline = p
	a.mu.Unlock()

	var enabled []health.Monitor
	for _, m := range p.monitors {
		hm, _ := health.LookupMonitor(m.Name())
		enabled = append(enabled, hm)
	}
	a.exporter.SetMonitors(enabled)
	var jobs []scheduler.Job
	for _, m := range p.monitors {
		for _, chk := range m.Checks() {
			jobs = append(jobs, a.checkJob(chk))
		}
	}
	if err := a.sched.Set(jobs); err != nil {
		return err
	}
	// Sources restart only when their settings change: a restart re-reads
	// from the end and could miss lines written in between.
	if old != nil && reflect.DeepEqual(old.cfg.Sources, c.Sources) {
		p.sources = old.sources
	} else {
		if old != nil {
			old.stop()
		}
		p.sources = a.startSources(ctx, c)
	}
	if old != nil {
		old.release()
	}
	p.streams = a.startStreams(ctx, p)
	a.metrics.ConfigReload(true)
	a.opts.Log.Info("agent config applied", "monitors", len(p.monitors))
	return nil
}

// pipeline is everything derived from one config.
type pipeline struct {
	cfg config.Config
	// candidates are the enabled monitors; monitors those of them that apply
	// to this node (see monitor.Applier).
	candidates []monitor.Monitor
	monitors   []monitor.Monitor
	matcher    *rules.Matcher
	// byReason finds the monitor that interprets a rule's matches.
	byReason map[string]monitor.Monitor
	sources  *runningSources
	// streams run the push sources (monitor.Streamer) of the monitors.
	streams *runningSources
}

func (p *pipeline) stop() {
	if p.sources != nil {
		p.sources.stop()
	}
}

func (a *Agent) buildPipeline(ctx context.Context, c config.Config) (*pipeline, error) {
	env := monitor.Env{HostRoot: a.opts.HostRoot, Clock: a.opts.Clock, Threshold: c.Threshold}
	p := &pipeline{cfg: c, byReason: map[string]monitor.Monitor{}}
	p.candidates = buildMonitors(c, env, a.opts, a.pods, a.nodeLabels(), a.dcgmSource)
	p.monitors = applicable(ctx, p.candidates)
	var all []logline.Rule
	for _, m := range p.monitors {
		for _, r := range m.Rules() {
			if _, on := c.Effective(r.Reason); !on {
				continue
			}
			p.byReason[r.Reason] = m
			all = append(all, r)
		}
	}
	matcher, err := rules.Compile(all)
	if err != nil {
		return nil, fmt.Errorf("compiling log rules: %w", err)
	}
	p.matcher = matcher
	return p, nil
}

// handleLine runs one log line through the rules and reports what matched.
func (a *Agent) handleLine(line logline.Line) {
	a.metrics.LineRead(string(line.Source))
	a.mu.Lock()
	p := a.pipeline
	a.mu.Unlock()
	if p == nil {
		return
	}
	p.matcher.Match(line, func(m logline.Match) {
		mon := p.byReason[m.Reason]
		if mon == nil {
			return
		}
		a.interpretMu.Lock()
		findings := mon.Interpret(m)
		a.interpretMu.Unlock()
		for _, f := range findings {
			if f.Observed.IsZero() {
				f.Observed = line.Time
			}
			a.report(p, f)
		}
	})
}

// report publishes a log- or stream-derived finding under p's config.
func (a *Agent) report(p *pipeline, f monitor.Finding) {
	if r, on := p.cfg.Effective(f.Reason); on {
		a.exporter.Report(exporter.Detection{Reason: f.Effective(r), Finding: f})
	}
}

// checkJob wraps a check for the scheduler: a bounded run, errors reported
// once until the check works again, results to the exporter.
func (a *Agent) checkJob(chk monitor.Check) scheduler.Job {
	return scheduler.Job{Name: chk.Name, Period: chk.Period, Run: func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, chk.Period)
		defer cancel()
		findings, err := chk.Run(ctx)
		key := "check/" + chk.Name
		if err != nil {
			a.metrics.CheckError(chk.Name)
			a.errOnce.report(key, fmt.Errorf("check %s could not read its input; keeping the previous state: %w", chk.Name, err))
			return
		}
		a.errOnce.clear(key)
		a.mu.Lock()
		cfg := a.pipeline.cfg
		a.mu.Unlock()
		var ds []exporter.Detection
		for _, f := range findings {
			if r, on := cfg.Effective(f.Reason); on {
				ds = append(ds, exporter.Detection{Reason: f.Effective(r), Finding: f})
			}
		}
		a.exporter.ReportCheck(chk.Reasons, ds)
	}}
}

// reportOnce logs a recurring problem once, and again only after it cleared.
type reportOnce struct {
	mu      sync.Mutex
	active  map[string]bool
	log     logr.Logger
	metrics *metrics.Agent
}

func (r *reportOnce) report(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		r.active = map[string]bool{}
	}
	if r.active[key] {
		return
	}
	r.active[key] = true
	r.log.Error(err, "agent problem (reported once until it clears)", "what", key)
}

func (r *reportOnce) clear(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active[key] {
		delete(r.active, key)
		r.log.Info("agent problem cleared", "what", key)
	}
}
