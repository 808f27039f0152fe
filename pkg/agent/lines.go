package agent

import (
	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitor"
)

// handleLine runs one log line through the rules and reports what matched.
// A line that matches a rule's text but whose writer the rule does not
// believe (logline.Provenance) is no fault: it is only counted.
func (a *Agent) handleLine(line logline.Line) {
	a.metrics.LineRead(string(line.Source))
	a.mu.Lock()
	p := a.pipeline
	a.mu.Unlock()
	if p == nil {
		return
	}
	p.matcher.MatchOrReject(line, func(m logline.Match) {
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
			if line.Replayed {
				// Read again at start only to restore the counts of the
				// reasons promoted when they repeat.
				if r, on := p.cfg.Effective(f.Reason); on {
					a.promote(p, f.Effective(r), f, true)
				}
				continue
			}
			a.report(p, f)
		}
	}, func(reason string) { a.metrics.LineRejected(string(line.Source), reason) })
}

// report publishes a log- or stream-derived finding under p's config, and
// counts it for its promotion.
func (a *Agent) report(p *pipeline, f monitor.Finding) {
	if r, on := p.cfg.Effective(f.Reason); on {
		r = f.Effective(r)
		a.exporter.Report(exporter.Detection{Reason: r, Finding: f})
		a.promote(p, r, f, false)
	}
}
