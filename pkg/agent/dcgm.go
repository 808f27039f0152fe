package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

// dcgmSource is the DCGM source of one set of settings.
type dcgmSource struct {
	cfg    dcgm.Config
	client *dcgm.Client
	src    *dcgm.Source
}

// dcgmSource returns the DCGM source for c, the current one while the
// settings that reach dcgmi do not change: a config reload must not make the
// agent forget that a host engine answered (and so stop reporting its loss).
// Mode off returns nil.
func (a *Agent) dcgmSource(c dcgm.Config) *dcgm.Source {
	a.dcgmMu.Lock()
	defer a.dcgmMu.Unlock()
	if c.Mode == dcgm.Off {
		a.dcgm = nil
		return nil
	}
	if cur := a.dcgm; cur != nil && cur.cfg.Mode == c.Mode && cur.cfg.Dcgmi == c.Dcgmi && cur.cfg.DcgmiFrom == c.DcgmiFrom && cur.cfg.HostEngine == c.HostEngine {
		return cur.src
	}
	client := &dcgm.Client{Runner: a.opts.Commands, HostRunner: a.opts.HostCommands, From: c.DcgmiFrom, Dcgmi: c.Dcgmi, HostEngine: c.HostEngine}
	a.dcgm = &dcgmSource{cfg: c, client: client, src: dcgm.NewSource(client, c.Mode, a.opts.Log.WithName("dcgm"))}
	return a.dcgm.src
}

// dcgmClient is the dcgmi client of the config in force, for diagnostics;
// nil when DCGM is off (or before the first config).
func (a *Agent) dcgmClient() *dcgm.Client {
	a.dcgmMu.Lock()
	defer a.dcgmMu.Unlock()
	if a.dcgm == nil {
		return nil
	}
	return a.dcgm.client
}

// dcgmDiagnostics runs the GPU diagnostics of NodeDiagnostics through DCGM
// and reports what they find (DCGMDiagnosticFailure) like any detection.
type dcgmDiagnostics struct{ a *Agent }

func (d dcgmDiagnostics) Run(ctx context.Context, level int, timeout time.Duration) (diagnostics.GPUDiagnosticResult, error) {
	c := d.a.dcgmClient()
	if c == nil {
		return diagnostics.GPUDiagnosticResult{}, fmt.Errorf("%w: DCGM is off in the agent config (monitors.nvidia.dcgm.mode)", diagnostics.ErrGPUDiagnosticsUnavailable)
	}
	if err := c.Installed(); err != nil {
		return diagnostics.GPUDiagnosticResult{}, fmt.Errorf("%w: %v (monitors.nvidia.dcgm.dcgmi)", diagnostics.ErrGPUDiagnosticsUnavailable, err)
	}
	r, raw, err := c.Diag(ctx, level, timeout)
	if errors.Is(err, dcgm.ErrUnreachable) {
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
