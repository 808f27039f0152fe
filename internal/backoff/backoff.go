// Package backoff paces the retries of a failed call: exponentially
// growing delays with jitter and a cap, waited on an injected clock. It is
// the retry policy of nodemend's loops that write to the API server (the
// agent's status writes, the diagnostics' final status writes), and
// Supervisor restarts the agent's long-running readers and streams with it;
// reuse them rather than writing another.
package backoff

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Jitter is the most a delay is lengthened at random, as a fraction: every
// delay lies between the nominal one and Jitter more, so that the agents
// of a fleet that failed together do not retry together.
const Jitter = 0.2

// Retry hands out the delays of one sequence of retries. Not safe for
// concurrent use.
type Retry struct {
	initial, max time.Duration
	jitter       float64
	b            wait.Backoff
}

// New returns delays that start at initial and double up to max; with
// jitter no delay is longer than max×(1+Jitter).
func New(initial, max time.Duration) *Retry { return newRetry(initial, max, Jitter) }

func newRetry(initial, max time.Duration, jitter float64) *Retry {
	r := &Retry{initial: initial, max: max, jitter: jitter}
	r.Reset()
	return r
}

// Next returns the delay before the next attempt.
func (r *Retry) Next() time.Duration { return r.b.Step() }

// Reset starts over from the initial delay (after a success).
func (r *Retry) Reset() {
	r.b = wait.Backoff{Duration: r.initial, Factor: 2, Jitter: r.jitter, Cap: r.max, Steps: math.MaxInt32}
}

// Wait waits Next() on clk; false when ctx ended first.
func (r *Retry) Wait(ctx context.Context, clk clock.Clock) bool { return sleep(ctx, clk, r.Next()) }

// MaxAttempts is the most attempts a sequence of retries makes within d,
// counting the first: the shortest delays (no jitter) from the start.
func MaxAttempts(initial, max, d time.Duration) int {
	n, elapsed, delay := 1, time.Duration(0), initial
	for {
		if elapsed+delay > d {
			return n
		}
		elapsed += delay
		n++
		delay = min(delay*2, max)
	}
}
