package ladder

import (
	"testing"
	"time"
)

// "Quarantine is for a person. The node stays cordoned and tainted ...
// until kubectl mend release NODE or until every rule of its policy has
// been healthy for quarantine.healthyFor (24 h by default; 0: only a
// person)."
func TestQuarantineHoldsUntilHealthyForHealthyFor(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	day := 24 * time.Hour
	for _, c := range []struct {
		name       string
		healthy    bool
		since      time.Time
		healthyFor time.Duration
		want       Hold
	}{
		// healthyFor 0: a healthy node stays quarantined, however long it
		// has been healthy, and no spell is started.
		{"0, healthy, no spell", true, time.Time{}, 0, Hold{}},
		{"0, healthy for a year", true, now.Add(-365 * day), 0, Hold{HealthySince: now.Add(-365 * day)}},
		{"0, unhealthy", false, time.Time{}, 0, Hold{}},
		// A spell starts, and is waited for to the second.
		{"healthy, no spell yet", true, time.Time{}, day, Hold{HealthySince: now, Wake: now.Add(day)}},
		{"healthy, a second short", true, now.Add(-day + time.Second), day, Hold{HealthySince: now.Add(-day + time.Second), Wake: now.Add(time.Second)}},
		{"healthy for exactly healthyFor", true, now.Add(-day), day, Hold{Release: true, HealthySince: now.Add(-day)}},
		{"healthy for longer", true, now.Add(-2 * day), day, Hold{Release: true, HealthySince: now.Add(-2 * day)}},
		// A fault ends the spell: the next one starts over.
		{"unhealthy, a spell recorded", false, now.Add(-day + time.Second), day, Hold{}},
		{"unhealthy, no spell", false, time.Time{}, day, Hold{}},
	} {
		if got := Quarantined(c.healthy, c.since, c.healthyFor, now); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
