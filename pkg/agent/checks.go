package agent

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"

	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/agent/scheduler"
	"nodemend.dev/nodemend/pkg/monitor"
)

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
