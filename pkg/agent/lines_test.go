package agent

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/health"
)

// A Fatal line of the kernel log's backlog whose quiet period has passed
// since it was written proved a fault that is over: the agent, restarted,
// does not raise it again (the real node's KernelReady stayed False a
// minute after start because a pids line six minutes old got a fresh
// one-minute quiet period).
func TestFaultOver(t *testing.T) {
	now := time.Date(2026, 12, 6, 1, 13, 0, 0, time.UTC)
	pids, ok := health.LookupReason(health.ReasonForkFailedOutOfPIDs)
	if !ok {
		t.Fatal("no ForkFailedOutOfPIDs")
	}
	with := func(r health.Reason, quiet time.Duration, sev health.Severity) health.Reason {
		r.QuietPeriod, r.Severity = quiet, sev
		return r
	}
	for _, c := range []struct {
		name   string
		r      health.Reason
		logged time.Time
		want   bool
	}{
		{"quiet period passed", with(pids, time.Minute, health.Fatal), now.Add(-6 * time.Minute), true},
		{"quiet period ends now", with(pids, time.Minute, health.Fatal), now.Add(-time.Minute), true},
		{"quiet period not over", with(pids, 45*time.Minute, health.Fatal), now.Add(-6 * time.Minute), false},
		{"a second before the end", with(pids, time.Minute, health.Fatal), now.Add(-time.Minute + time.Second), false},
		{"no quiet period of its own", with(pids, 0, health.Fatal), now.Add(-6 * time.Hour), false},
		{"a Warning: an Event, never held", with(pids, time.Minute, health.Warning), now.Add(-6 * time.Minute), false},
		{"no time", with(pids, time.Minute, health.Fatal), time.Time{}, false},
		{"a time in the future", with(pids, time.Minute, health.Fatal), now.Add(time.Hour), false},
	} {
		if got := faultOver(c.r, c.logged, now); got != c.want {
			t.Errorf("%s: over = %v, want %v", c.name, got, c.want)
		}
	}
}
