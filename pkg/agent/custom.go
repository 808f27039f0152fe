package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/agent/exporter"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/custom"
	"nodemend.dev/nodemend/pkg/source/tail"
)

// customMonitor builds the monitor of the operator's rules and checks, or
// nil when the config has none.
func (a *Agent) customMonitor(c config.Config) detection.Monitor {
	if len(c.CustomRules) == 0 && len(c.CustomChecks) == 0 {
		return nil
	}
	opts := custom.Options{Clock: a.opts.Clock, Run: a.opts.Commands}
	if a.opts.HostCommands != nil {
		// Programs of the host's filesystem, run inside it.
		opts.Run = a.opts.HostCommands
	}
	red := redact.New()
	opts.Redact = func(s string) string { out, _ := red.String(s); return out }
	for _, r := range c.CustomRules {
		opts.Rules = append(opts.Rules, r.LogRule())
	}
	for _, k := range c.CustomChecks {
		opts.Checks = append(opts.Checks, custom.Check{Reason: k.Reason, Command: k.Command, Period: k.Period.Duration, Timeout: k.TimeoutOrDefault()})
	}
	return custom.New(opts)
}

// ReasonUntrustedLogFile is the reason of the Warning Event on the Node
// when a custom rule's file is not read: someone other than root could
// write it, or a directory on the way to it, so its lines are no evidence.
const ReasonUntrustedLogFile = "UntrustedLogFile"

// startFiles follows the host files the custom rules read. A file is read
// only while it and the directories on the way to it are root's alone
// (childproc.CheckFileTrust); it is checked again at each (re)start.
func (a *Agent) startFiles(parent context.Context, files []string) *runningSources {
	ctx, cancel := context.WithCancel(parent)
	rs := &runningSources{cancel: cancel}
	for _, f := range files {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			a.supervise(time.Minute, "source/file:"+f, "file").Go(ctx, func(ctx context.Context) error {
				real, err := childproc.CheckFileTrust(a.opts.HostRoot, f)
				if err != nil {
					if errors.Is(err, childproc.ErrUntrusted) {
						a.fileRefused(f, err)
					}
					// %v: the refusal is reported above, as a file's.
					return fmt.Errorf("not reading %s for the custom rules: %v", f, err)
				}
				a.fileRefusals.Delete(f)
				opts := tail.Options{OnError: func(err error) { a.errOnce.report("source/file:"+f, err) }}
				return tail.Follow(ctx, filepath.Join(a.opts.HostRoot, real), opts, func(line []byte, at time.Time) {
					a.handleLine(logline.Line{Source: logline.File, Unit: f, Text: strings.ToValidUTF8(string(line), "\uFFFD"), Time: at})
				})
			})
		}()
	}
	return rs
}

// fileRefused records on the Node, once until it is read again, that a
// custom rule's file is not read.
func (a *Agent) fileRefused(file string, err error) {
	if _, dup := a.fileRefusals.LoadOrStore(file, true); dup || a.exporter == nil {
		return
	}
	a.recorder.Event(a.exporter.NodeRef(), corev1.EventTypeWarning, ReasonUntrustedLogFile,
		health.BoundMessage("nodemend-agent does not believe a file others can write; its custom rules read nothing: "+err.Error()))
}

// promotions count the occurrences of the reasons the config promotes when
// they repeat (config.Promotion), across config reloads: a reload that
// keeps a promotion keeps its count.
type promotions struct {
	mu    sync.Mutex
	specs map[string]config.Promotion
	seen  map[string]*occurrences
}

// occurrences are the times of a reason's last occurrences, at most count.
type occurrences struct {
	times []time.Time // ascending
	// message is the promoted fault's message while the count stays
	// reached: the occurrence that reached it (a message that changed on
	// every occurrence would rewrite the condition each time).
	message string
}

// set installs the promotions of a new config; a reason whose promotion
// changed starts counting over.
func (p *promotions) set(specs map[string]config.Promotion) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]*occurrences{}
	}
	for name := range p.seen {
		if old, now := p.specs[name], specs[name]; old.Count != now.Count || old.Within != now.Within || old.Reason != now.Reason {
			delete(p.seen, name)
		}
	}
	p.specs = specs
}

// add counts an occurrence of reason at t, with its message, and reports
// the promoted fault's message when the occurrences within the window
// ending at t reach the count ("" when they do not).
func (p *promotions) add(reason string, t time.Time, message string) (config.Promotion, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	spec, ok := p.specs[reason]
	if !ok {
		return spec, ""
	}
	o := p.seen[reason]
	if o == nil {
		o = &occurrences{}
		p.seen[reason] = o
	}
	i, dup := slices.BinarySearchFunc(o.times, t, func(a, b time.Time) int { return a.Compare(b) })
	if !dup { // the same line read twice (a reader restarted) is one occurrence
		o.times = slices.Insert(o.times, i, t)
	}
	if len(o.times) > spec.Count {
		o.times = o.times[len(o.times)-spec.Count:]
	}
	newest := o.times[len(o.times)-1]
	n := 0
	for _, x := range o.times {
		if newest.Sub(x) <= spec.Within.Duration {
			n++
		}
	}
	if n < spec.Count {
		o.message = ""
		return spec, ""
	}
	if o.message == "" {
		o.message = fmt.Sprintf("%s %d times within %v (%d promote it to %s): %s", reason, n, spec.Within.Duration, spec.Count, spec.Reason, message)
	}
	return spec, o.message
}

// promote counts a Warning finding of a promoted reason and reports the
// promoted reason when it has repeated enough. countOnly counts without
// reporting (a line replayed at start to restore the count).
func (a *Agent) promote(p *pipeline, r health.Reason, f detection.Finding, countOnly bool) {
	if r.Severity != health.Warning {
		return
	}
	spec, msg := a.promos.add(r.Name, f.Observed, f.Message)
	if msg == "" || countOnly {
		return
	}
	pr, on := p.cfg.Effective(spec.Reason)
	if !on {
		return
	}
	a.exporter.Report(exporter.Detection{Reason: pr, Finding: detection.Finding{Reason: spec.Reason, Observed: f.Observed, Message: msg}})
}

// warnOrphanCustom logs the custom reasons whose condition no running
// monitor writes: their findings are dropped (a condition nodemend does not
// watch on this node is absent, never written by a rule alone).
func (a *Agent) warnOrphanCustom(c config.Config, running []detection.Monitor) {
	written := map[health.ConditionType]bool{}
	for _, m := range running {
		if hm, ok := health.LookupMonitor(m.Name()); ok {
			written[hm.Condition] = true
		}
	}
	for name, r := range c.CustomReasons() {
		if !written[r.Condition] {
			a.opts.Log.Info("a custom reason's condition is not written on this node (no monitor of it runs here); its findings are dropped", "reason", name, "condition", r.Condition)
		}
	}
}
