package agent

import (
	"context"
	"fmt"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// dcgmDiagnostics runs the GPU diagnostics of NodeDiagnostics through the
// DCGM keeper of the nvidia monitor's settings and reports what they find
// (DCGMDiagnosticFailure) like any detection.
type dcgmDiagnostics struct{ a *Agent }

func (d dcgmDiagnostics) Run(ctx context.Context, level int, timeout time.Duration) (diagnostics.GPUDiagnosticResult, error) {
	r, raw, err := d.a.dcgm.Diagnose(ctx, level, timeout)
	if dcgm.Unavailable(err) {
		return diagnostics.GPUDiagnosticResult{}, fmt.Errorf("%w: %v", diagnostics.ErrGPUDiagnosticsUnavailable, err)
	}
	res := diagnostics.GPUDiagnosticResult{Output: raw}
	if err != nil {
		return res, err
	}
	res.Version, res.DriverVersion, res.RuntimeError, res.Summary = r.Version, r.DriverVersion, r.RuntimeError, r.Summary()
	failed := r.Failed()
	res.Passed = len(failed) == 0
	for _, f := range failed {
		n := f.Test.Name
		if s := f.Result.Entity.Subject(); s != "" {
			n += " on " + s
		}
		res.Failed = append(res.Failed, n)
	}
	now := d.a.opts.Clock.Now()
	for _, f := range dcgm.DiagFindings(r, level) {
		d.a.reportNow(detection.Finding{Reason: f.Reason, Message: f.Message, Subject: f.Subject, Severity: f.Severity, Observed: now})
	}
	return res, nil
}

// reportNow publishes a finding that no monitor check produced (a requested
// diagnostic's) under the config in force.
func (a *Agent) reportNow(f detection.Finding) {
	a.mu.Lock()
	p := a.pipeline
	a.mu.Unlock()
	if p != nil {
		a.report(p, f)
	}
}
