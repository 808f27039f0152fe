package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/agent/scheduler"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// checkJob wraps a check for the scheduler: a bounded run, errors reported
// once until the check works again, results to the exporter.
func (a *Agent) checkJob(chk detection.Check) scheduler.Job {
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
		p := a.pipeline
		a.mu.Unlock()
		var ds []exporter.Detection
		for _, f := range findings {
			if r, on := p.cfg.Effective(f.Reason); on {
				ds = append(ds, exporter.Detection{Reason: f.Effective(r), Finding: f})
			}
		}
		a.exporter.ReportCheck(chk.Reasons, ds)
		// Each run that sees a Warning is one occurrence for its promotion.
		for _, d := range ds {
			if d.Finding.Observed.IsZero() {
				d.Finding.Observed = a.opts.Clock.Now()
			}
			a.promote(p, d.Reason, d.Finding, false)
		}
	}}
}

// reportOnce logs a recurring problem once, and again only after it cleared.
type reportOnce struct {
	mu      sync.Mutex
	active  map[string]bool
	log     logr.Logger
	metrics *metrics.Agent
	// untrusted, when set, is also told a problem that is a host tool
	// refused (childproc.ErrUntrusted): operators must see it on the Node.
	untrusted func(err error)
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
	if r.untrusted != nil && errors.Is(err, childproc.ErrUntrusted) {
		r.untrusted(err)
	}
}

func (r *reportOnce) clear(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active[key] {
		delete(r.active, key)
		r.log.Info("agent problem cleared", "what", key)
	}
}

// ReasonUntrustedHostTool is the reason of the Warning Event on the Node
// when the agent refuses to run a host tool (childproc.CheckTrust): the tool,
// its interpreter, loader, a library or a directory on the way to one of
// them could be written by someone other than root, who would then run code
// as root through the agent. The message names the file and why.
const ReasonUntrustedHostTool = "UntrustedHostTool"

// toolRefused records a refused host tool on the Node.
func (a *Agent) toolRefused(err error) {
	if a.exporter == nil {
		return
	}
	a.recorder.Event(a.exporter.NodeRef(), corev1.EventTypeWarning, ReasonUntrustedHostTool,
		health.BoundMessage("nodemend-agent does not run it as root: "+err.Error()))
}
