package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
)

// appliesTimeout bounds one Applies call (loading a vendor library).
const appliesTimeout = 10 * time.Second

// applicable returns the monitors that apply to this node: those that do
// not implement detection.Applier, and those whose Applies reports true.
func applicable(ctx context.Context, ms []detection.Monitor) []detection.Monitor {
	var out []detection.Monitor
	for _, m := range ms {
		if ap, ok := m.(detection.Applier); ok {
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

func names(ms []detection.Monitor) []string {
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
