// Package custom runs an operator's own log rules and checks (the agent
// config's customRules and customChecks; docs/agent-config.md). It is a
// monitor of no condition of its own: each rule and check names the
// condition its reason belongs to, and counts where that condition's
// monitor runs.
//
// Checks speak node-problem-detector's custom plugin protocol: exit status
// 0 is OK, 1 a problem, anything else (and a timeout) unknown — the last
// state is kept —, and the first line of the output is the message.
package custom

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// Name is the monitor's name; it is no registry monitor.
const Name = "custom"

// MaxOutputBytes is how much of a check's standard output is read: its
// first line is the message, NPD's plugins print a line or two.
const MaxOutputBytes = 4096

// Check is one operator's check.
type Check struct {
	Reason  string
	Command []string
	Period  time.Duration
	Timeout time.Duration
}

// Options build a Monitor.
type Options struct {
	Rules  []logline.Rule
	Checks []Check
	// Run runs the checks' programs: the host's (command.Exec with Root:
	// found and trust-checked under the host root, run chrooted into it).
	Run command.Runner
	// Redact masks secrets in a check's output before it becomes a
	// message (pkg/diagnostics/redact); nil keeps it as is.
	Redact func(string) string
	Clock  clock.PassiveClock
}

// Monitor implements detection.Monitor for the operator's rules and checks.
type Monitor struct {
	opts   Options
	checks []detection.Check
}

var _ detection.Monitor = (*Monitor)(nil)

// New builds the monitor.
func New(opts Options) *Monitor {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m := &Monitor{opts: opts}
	for _, c := range opts.Checks {
		m.checks = append(m.checks, detection.Check{
			Name: "custom/" + c.Reason, Period: c.Period, Reasons: []string{c.Reason},
			Run: func(ctx context.Context) ([]detection.Finding, error) { return m.run(ctx, c) },
		})
	}
	return m
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule { return m.opts.Rules }

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check { return m.checks }

// Interpret implements detection.Monitor: one finding per match, about the
// line's unit or file (so that two units' faults are two faults).
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	return []detection.Finding{{Reason: match.Reason, Message: match.Message, Observed: match.Line.Time, Subject: match.Line.Unit}}
}

// ErrUnknown wraps the result of a check that neither passed nor found a
// problem: the last state stays.
var ErrUnknown = errors.New("custom check result unknown")

// run runs one check.
func (m *Monitor) run(ctx context.Context, c Check) ([]detection.Finding, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	out := &limited{max: MaxOutputBytes}
	err := m.opts.Run.Run(ctx, c.Command[0], c.Command[1:], out)
	code, why := exitCode(err)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: %s did not finish within %v", ErrUnknown, c.Command[0], c.Timeout)
	case code == 0:
		return nil, nil
	case code == 1:
		return []detection.Finding{{Reason: c.Reason, Message: m.message(c, out.Bytes()), Observed: m.opts.Clock.Now()}}, nil
	case code > 1:
		return nil, fmt.Errorf("%w: %s exited %d: %s", ErrUnknown, c.Command[0], code, m.firstLine(out.Bytes()))
	}
	return nil, why // not run: not found, refused (untrusted), not started
}

// message is a problem's message: the first line of the output, redacted
// and bounded, or a plain statement when the program printed nothing.
func (m *Monitor) message(c Check, out []byte) string {
	if line := m.firstLine(out); line != "" {
		return line
	}
	return fmt.Sprintf("%s reported a problem (exit status 1) without a message", c.Command[0])
}

func (m *Monitor) firstLine(out []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, MaxOutputBytes), MaxOutputBytes)
	line := ""
	if sc.Scan() {
		line = strings.TrimSpace(sc.Text())
	}
	if m.opts.Redact != nil {
		line = m.opts.Redact(line)
	}
	return health.BoundMessage(line)
}

// exitCode is the exit status of a run: 0 for none, the process's status,
// or -1 with the error when it did not run or was killed by a signal.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return code, err
		}
	}
	return -1, err
}

// limited keeps the first max bytes written to it and discards the rest
// (the program is not blocked by a full pipe).
type limited struct {
	buf bytes.Buffer
	max int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (l *limited) Bytes() []byte { return l.buf.Bytes() }
