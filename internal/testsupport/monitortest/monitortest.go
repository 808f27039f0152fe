// Package monitortest holds what monitor tests share: an environment over a
// fake host root, running one check by name, a compact view of findings,
// and the checks every monitor's rules and registry entries must pass.
package monitortest

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

// Env is a monitor environment over root with the given clock; thresholds
// in thr override the registry defaults.
func Env(root *hostroot.Root, clk clock.PassiveClock, thr map[string]float64) detection.Env {
	defaults := detection.Env{}.WithDefaults().Threshold
	return detection.Env{
		HostRoot: root.Dir,
		Clock:    clk,
		Threshold: func(reason string) float64 {
			if v, ok := thr[reason]; ok {
				return v
			}
			return defaults(reason)
		},
	}
}

// RunCheck runs the check called name once.
func RunCheck(t *testing.T, m detection.Monitor, name string) ([]detection.Finding, error) {
	t.Helper()
	for _, c := range m.Checks() {
		if c.Name == name {
			return c.Run(context.Background())
		}
	}
	t.Fatalf("no check %q", name)
	return nil, nil
}

// Reasons lists findings as "Reason/Subject", comma-separated.
func Reasons(fs []detection.Finding) string {
	var out []string
	for _, f := range fs {
		s := f.Reason
		if f.Subject != "" {
			s += "/" + f.Subject
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// EveryRuleMatches fails for each rule that matches none of the positive
// example lines: a rule without a test case is a rule nobody has seen fire.
func EveryRuleMatches(t *testing.T, rs []logline.Rule, positives []logline.Line) {
	t.Helper()
	for i, r := range rs {
		mt, err := rules.Compile([]logline.Rule{r})
		if err != nil {
			t.Fatalf("rule %d (%s): %v", i, r.Reason, err)
		}
		hit := false
		for _, l := range positives {
			mt.Match(l, func(logline.Match) { hit = true })
		}
		if !hit {
			t.Errorf("rule %d (%s, %q) has no positive test case", i, r.Reason, r.Contains)
		}
	}
}

// RegistryCoverage checks that m produces exactly the registry's reasons
// of condition, each from the source the registry names: rules are log
// sources, checks declare theirs. alsoFromLog are reasons produced from
// logs outside the rules (a monitor's own Interpret). It also checks that
// every check can run and that the registry knows the monitor.
func RegistryCoverage(t *testing.T, m interface {
	detection.Monitor
	Rules() []logline.Rule
}, condition health.ConditionType, alsoFromLog ...string) {
	t.Helper()
	got := map[string]health.Source{}
	for _, r := range m.Rules() {
		got[r.Reason] = health.FromLog
	}
	for _, r := range alsoFromLog {
		got[r] = health.FromLog
	}
	for _, c := range m.Checks() {
		if c.Period <= 0 || c.Run == nil {
			t.Errorf("check %s: want a period and Run", c.Name)
		}
		for _, r := range c.Reasons {
			got[r] = health.FromCheck
		}
	}
	for _, r := range health.Reasons() {
		if r.Condition != condition {
			continue
		}
		if src, ok := got[r.Name]; !ok || src != r.Source {
			t.Errorf("registry reason %s (%s) is produced as %q", r.Name, r.Source, src)
		}
		delete(got, r.Name)
	}
	if len(got) != 0 {
		t.Errorf("reasons outside %s: %v", condition, got)
	}
	if mon, ok := health.LookupMonitor(m.Name()); !ok || mon.Condition != condition {
		t.Fatalf("registry monitor %q: %+v", m.Name(), mon)
	}
}

// Stepper returns a function that runs check name of m, fails unless the
// findings' reasons (Reasons) are want, and then moves clk forward by step:
// one call per check period, for tests that walk a monitor through time.
func Stepper(t *testing.T, m detection.Monitor, name string, clk *clocktesting.FakePassiveClock, step time.Duration) func(want string) {
	return func(want string) {
		t.Helper()
		fs, err := RunCheck(t, m, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := Reasons(fs); got != want {
			t.Fatalf("%s: findings %q, want %q (%v)", name, got, want, fs)
		}
		clk.SetTime(clk.Now().Add(step))
	}
}
