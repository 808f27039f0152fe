package agent

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/agent/scheduler"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

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
		if hm, ok := health.LookupMonitor(m.Name()); ok { // not the operator's (custom)
			enabled = append(enabled, hm)
		}
	}
	a.exporter.SetMonitors(enabled)
	a.exporter.SetCustomReasons(c.CustomReasons())
	a.promos.set(c.Promotions())
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
		if old != nil && old.sources != nil {
			old.sources.stop()
		}
		p.sources = a.startSources(ctx, c, p.replayWindows())
	}
	if old != nil && slices.Equal(old.cfg.LogFiles(), c.LogFiles()) {
		p.files = old.files
	} else {
		if old != nil && old.files != nil {
			old.files.stop()
		}
		p.files = a.startFiles(ctx, c.LogFiles())
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
	// to this node (see detection.Applier).
	candidates []detection.Monitor
	monitors   []detection.Monitor
	matcher    *rules.Matcher
	// byReason finds the monitor that interprets a rule's matches.
	byReason map[string]detection.Monitor
	sources  *runningSources
	// files follow the host files of the custom rules.
	files *runningSources
	// streams run the push sources (detection.Streamer) of the monitors.
	streams *runningSources
}

func (p *pipeline) stop() {
	if p.sources != nil {
		p.sources.stop()
	}
	if p.files != nil {
		p.files.stop()
	}
}

// release stops p's streams and closes its monitors that hold resources
// (vendor libraries). Its log sources are stopped by stop, separately,
// because a new pipeline may keep them.
func (p *pipeline) release() {
	if p.streams != nil {
		p.streams.stop()
		p.streams = nil
	}
	for _, m := range p.candidates {
		if c, ok := m.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

func (a *Agent) buildPipeline(ctx context.Context, c config.Config) (*pipeline, error) {
	env := detection.Env{HostRoot: a.opts.HostRoot, Clock: a.opts.Clock, Threshold: c.Threshold}
	p := &pipeline{cfg: c, byReason: map[string]detection.Monitor{}}
	p.candidates = buildMonitors(c, env, a.opts, a.pods, a.nodeLabels(), a.dcgm.Source)
	p.monitors = applicable(ctx, p.candidates)
	if cm := a.customMonitor(c); cm != nil {
		p.monitors = append(p.monitors, cm)
		a.warnOrphanCustom(c, p.monitors)
	}
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
