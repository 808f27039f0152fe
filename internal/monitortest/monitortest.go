// Package monitortest holds what monitor tests share: an environment over a
// fake host root, running one check by name, and a compact view of findings.
package monitortest

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/hostroot"
	"nodemend.dev/nodemend/pkg/agent/monitor"
)

// Env is a monitor environment over root with the given clock; thresholds
// in thr override the registry defaults.
func Env(root *hostroot.Root, clk clock.PassiveClock, thr map[string]float64) monitor.Env {
	defaults := monitor.Env{}.WithDefaults().Threshold
	return monitor.Env{
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
func RunCheck(t *testing.T, m monitor.Monitor, name string) ([]monitor.Finding, error) {
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
func Reasons(fs []monitor.Finding) string {
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
