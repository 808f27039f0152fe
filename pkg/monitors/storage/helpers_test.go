package storage

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

// withMount returns DefaultMounts with the mount at point changed by f.
func withMount(point string, f func(*hostroot.Mount)) []hostroot.Mount {
	ms := append([]hostroot.Mount(nil), hostroot.DefaultMounts...)
	for i := range ms {
		if ms[i].Point == point {
			f(&ms[i])
		}
	}
	return ms
}
