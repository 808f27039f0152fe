package ladder

import "time"

// Hold is what a quarantined node that no person has released needs now.
type Hold struct {
	// Release: it has been healthy for the policy's healthyFor; it returns
	// to service.
	Release bool
	// HealthySince is the start of its healthy spell to record (zero: none,
	// the node is not healthy); the caller writes it where it changed.
	HealthySince time.Time
	// Wake is when to look again without a change of the node (zero: only
	// a change wakes it).
	Wake time.Time
}

// Quarantined decides a quarantined node that no person released. healthy:
// no rule of its policy finds it unhealthy now; since: the recorded start
// of its healthy spell (zero: none); healthyFor: the policy's
// quarantine.healthyFor. A node healthy for healthyFor is released, at
// since+healthyFor exactly; a fault ends the spell. healthyFor 0 means only
// a person releases the node: however long it is healthy, nothing is
// recorded and nothing is released.
func Quarantined(healthy bool, since time.Time, healthyFor time.Duration, now time.Time) Hold {
	switch {
	case healthyFor <= 0:
		return Hold{HealthySince: since}
	case !healthy:
		return Hold{}
	case since.IsZero():
		return Hold{HealthySince: now, Wake: now.Add(healthyFor)}
	case !now.Before(since.Add(healthyFor)):
		return Hold{Release: true, HealthySince: since}
	}
	return Hold{HealthySince: since, Wake: since.Add(healthyFor)}
}
