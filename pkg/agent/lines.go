package agent

import (
	"time"

	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
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
			r, on := p.cfg.Effective(f.Reason)
			if !on {
				continue
			}
			r = f.Effective(r)
			if line.Replayed || (line.Backlog && faultOver(r, f.Observed, a.opts.Clock.Now())) {
				// Read again at start only to restore the counts of the
				// reasons promoted when they repeat; a backlog line whose
				// fault is over likewise (raising it would show a healthy
				// node unhealthy after every restart of the agent).
				a.promote(p, r, f, true)
				continue
			}
			a.publish(p, r, f)
		}
	}, func(reason string) { a.metrics.LineRejected(string(line.Source), reason) })
}

// report publishes a log- or stream-derived finding under p's config, and
// counts it for its promotion.
func (a *Agent) report(p *pipeline, f detection.Finding) {
	if r, on := p.cfg.Effective(f.Reason); on {
		a.publish(p, f.Effective(r), f)
	}
}

// publish reports f under its effective reason r and counts it.
func (a *Agent) publish(p *pipeline, r health.Reason, f detection.Finding) {
	a.exporter.Report(exporter.Detection{Reason: r, Finding: f})
	a.promote(p, r, f, false)
}

// faultOver: a Fatal log-derived fault logged at logged, with a quiet
// period of its own, is over at now. A reason without one (the exporter's
// default applies) and a time in the future (a clock that moved) are not.
func faultOver(r health.Reason, logged, now time.Time) bool {
	return r.Severity == health.Fatal && r.QuietPeriod > 0 && !logged.IsZero() && !logged.Add(r.QuietPeriod).After(now)
}
