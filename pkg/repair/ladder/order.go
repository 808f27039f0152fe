package ladder

import (
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// OrderLife is how long the agent may take to start the order of attempt
// a: a third of the attempt's timeout, but long enough that an agent with
// the default clock-skew bound still has v1alpha1.OrderActWindow to start
// it (it refuses an order whose deadline is nearer than the bound), and
// always 10 s short of the timeout, so that an order is dead before the
// ladder moves on without it. The shortest timeout the API admits (1m)
// gives 50 s. Whole seconds, as activeDeadlineSeconds holds it.
func OrderLife(a Attempt) time.Duration {
	timeout := a.Timeout.Duration
	d := max(timeout/3, v1alpha1.DefaultMaxClockSkew+v1alpha1.OrderActWindow)
	d = min(d, timeout-10*time.Second, time.Hour)
	return max(d.Truncate(time.Second), 10*time.Second)
}

// OrderSeconds is the activeDeadlineSeconds of attempt a's order created
// at now. An order ends when one created as the attempt started would
// (a.Started plus OrderLife), however late it is created — an order found
// missing after a restart must not get a fresh deadline and outlive its
// attempt, or the ladder would move on to the next rung while an agent
// could still carry it out: two rungs in flight. ok is false when too
// little of that life is left for an agent with the default skew bound to
// start it (it refuses an order whose deadline is that near): then no
// order is created, and the attempt fails at its timeout.
func OrderSeconds(a Attempt, now time.Time) (seconds int64, ok bool) {
	left := a.Started.Add(OrderLife(a)).Sub(now)
	if left <= v1alpha1.DefaultMaxClockSkew {
		return 0, false
	}
	return int64(left / time.Second), true
}
