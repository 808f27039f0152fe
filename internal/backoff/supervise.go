package backoff

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"
)

// ErrReturned stands for the nil error of a supervised run: it should have
// run until its context ended.
var ErrReturned = errors.New("returned")

// Supervisor keeps a function running that should run until its context
// ends (a log reader, a vendor library's event stream, a child process):
// after each return it waits a Retry delay on Clock and starts it again.
// It is how every restarting loop of the agent restarts; use it rather
// than writing another. The waits have no jitter: what is restarted is
// local to the node, so the restarts of a fleet do not meet at a server,
// and the wait reported is the wait taken.
type Supervisor struct {
	// Clock paces the waits; nil is the real clock.
	Clock clock.Clock
	// Initial and Max bound the waits (see New). A run that lasted at least
	// Max, or reported progress, starts them over from Initial: it worked,
	// and its next failure is a new one.
	Initial, Max time.Duration
	// OnExit hears of every return before the context ended: why
	// (ErrReturned for a nil error) and the wait before the next start.
	// Nil discards them.
	OnExit func(err error, wait time.Duration)
}

// Run calls run until ctx ends, restarting it as the Supervisor says.
// progressed tells that the run did useful work before it ended (delivered
// entries), so that the waits start over.
func (s Supervisor) Run(ctx context.Context, run func(ctx context.Context) (progressed bool, err error)) {
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := newRetry(s.Initial, s.Max, 0)
	for {
		started := clk.Now()
		progressed, err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed || clk.Since(started) >= s.Max {
			r.Reset()
		}
		if err == nil {
			err = ErrReturned
		}
		wait := r.Next()
		if s.OnExit != nil {
			s.OnExit(err, wait)
		}
		if !sleep(ctx, clk, wait) {
			return
		}
	}
}

// Go is Run for a run without progress reports.
func (s Supervisor) Go(ctx context.Context, run func(ctx context.Context) error) {
	s.Run(ctx, func(ctx context.Context) (bool, error) { return false, run(ctx) })
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
