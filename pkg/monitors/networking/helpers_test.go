package networking

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/hostroot"
	"nodemend.dev/nodemend/pkg/agent/monitor"
	"nodemend.dev/nodemend/pkg/health"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// testEnv is a monitor environment over root with a fake clock and
// thresholds overridden by thr.
func testEnv(root *hostroot.Root, clk *clocktesting.FakePassiveClock, thr map[string]float64) monitor.Env {
	return monitor.Env{
		HostRoot: root.Dir,
		Clock:    clk,
		Threshold: func(reason string) float64 {
			if v, ok := thr[reason]; ok {
				return v
			}
			if r, ok := health.LookupReason(reason); ok && r.Threshold != nil {
				return r.Threshold.Default
			}
			return 0
		},
	}
}

func runCheck(t *testing.T, m *Monitor, name string) ([]monitor.Finding, error) {
	t.Helper()
	for _, c := range m.Checks() {
		if c.Name == name {
			return c.Run(context.Background())
		}
	}
	t.Fatalf("no check %q", name)
	return nil, nil
}

// reasons lists the reasons of fs as "Reason/Subject".
func reasons(fs []monitor.Finding) string {
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
