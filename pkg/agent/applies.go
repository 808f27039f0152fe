package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"nodemend.dev/nodemend/pkg/monitor"
	"nodemend.dev/nodemend/pkg/monitors/accel"
)

// appliesTimeout bounds one Applies call (loading a vendor library).
const appliesTimeout = 10 * time.Second

// applicable returns the monitors that apply to this node: those that do
// not implement monitor.Applier, and those whose Applies reports true.
func applicable(ctx context.Context, ms []monitor.Monitor) []monitor.Monitor {
	var out []monitor.Monitor
	for _, m := range ms {
		if ap, ok := m.(monitor.Applier); ok {
			actx, cancel := context.WithTimeout(ctx, appliesTimeout)
			applies := ap.Applies(actx)
			cancel()
			if !applies {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

func names(ms []monitor.Monitor) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name()
	}
	return out
}

// watchApplicability re-checks every AppliesPoll whether the set of
// applying monitors changed (a GPU driver loaded after the agent, a device
// that disappeared) and rebuilds the pipeline from the current config when it
// did. Conditions of monitors that stop applying are removed; a monitor that
// starts applying writes its condition.
func (a *Agent) watchApplicability(ctx context.Context) {
	t := a.opts.Clock.NewTicker(a.opts.AppliesPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		a.mu.Lock()
		p := a.pipeline
		a.mu.Unlock()
		if p == nil {
			continue
		}
		now := names(applicable(ctx, p.candidates))
		if slices.Equal(now, names(p.monitors)) {
			continue
		}
		a.opts.Log.Info("monitors that apply to this node changed; rebuilding", "before", names(p.monitors), "now", now)
		if err := a.applyConfig(ctx, p.cfg, nil); err != nil {
			a.errOnce.report("applicability", fmt.Errorf("rebuilding the pipeline: %w", err))
		}
	}
}

// startStreams runs the push sources of p's monitors, each restarted with
// backoff when it fails (the vendor library may come and go).
func (a *Agent) startStreams(parent context.Context, p *pipeline) *runningSources {
	ctx, cancel := context.WithCancel(parent)
	rs := &runningSources{cancel: cancel}
	for _, m := range p.monitors {
		st, ok := m.(monitor.Streamer)
		if !ok {
			continue
		}
		name := "stream/" + m.Name()
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			a.supervise(5*time.Minute, name, name).Go(ctx, func(ctx context.Context) error {
				if err := st.Stream(ctx, func(f monitor.Finding) { a.report(p, f) }); err != nil {
					return err
				}
				return errors.New("stream ended")
			})
		}()
	}
	return rs
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

// nodeLabels serves this node's labels to the accelerator monitors (expected
// device counts) from a cache refreshed at most every labelTTL: a check every
// 30 s on thousands of nodes must not become API load.
func (a *Agent) nodeLabels() accel.NodeLabels {
	const labelTTL = 5 * time.Minute
	var (
		mu      sync.Mutex
		labels  map[string]string
		fetched time.Time
	)
	return func(ctx context.Context) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := a.opts.Clock.Now()
		if labels != nil && now.Sub(fetched) < labelTTL {
			return labels, nil
		}
		n, err := a.opts.Client.GetNode(ctx, a.opts.NodeName)
		if err != nil {
			if labels != nil {
				return labels, nil // stale labels beat none
			}
			return nil, err
		}
		labels, fetched = n.Labels, now
		if labels == nil {
			labels = map[string]string{}
		}
		return labels, nil
	}
}
