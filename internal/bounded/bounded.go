// Package bounded runs calls that can block in the kernel for good — a statfs
// on a dead NFS server, an fsync on a wedged disk, an ioctl behind a stuck
// driver — with a deadline, so that a check never holds one of the agent's
// few scheduler workers past its timeout.
//
// A goroutine blocked in such a syscall cannot be cancelled. Guard therefore
// never starts a second call while the first is still stuck: a stuck resource
// costs one goroutine, however many checks run meanwhile.
package bounded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is wrapped by the error of a call that did not return in time.
var ErrTimeout = errors.New("timed out")

// StuckError reports a call that did not return in time, or that is still
// blocked from an earlier check.
type StuckError struct {
	// What names the operation, e.g. "statfs /var/lib/kubelet".
	What string
	// Since is when the blocked call started.
	Since time.Time
	// Waited is how long this check waited for it.
	Waited time.Duration
	// Earlier is true when the call was started by an earlier check and this
	// check did not start another.
	Earlier bool
}

func (e *StuckError) Error() string {
	if e.Earlier {
		return fmt.Sprintf("%s: still blocked since %s", e.What, e.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: %v after %v", e.What, ErrTimeout, e.Waited)
}

func (e *StuckError) Unwrap() error { return ErrTimeout }

// Guard serializes the calls on one resource. The zero value is ready; it
// must not be copied after first use.
type Guard struct {
	mu      sync.Mutex
	running bool
	since   time.Time
}

// Busy reports whether a call is still running, and since when.
func (g *Guard) Busy() (bool, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.since
}

// Run calls fn in its own goroutine and waits at most timeout for it (less if
// ctx ends first). When fn does not return in time Run returns a *StuckError
// and fn keeps running; until it returns, later Runs on g return a
// *StuckError at once without calling fn again. fn must not touch state the
// caller reuses after a timeout: give it its own buffers.
func Run[T any](ctx context.Context, g *Guard, what string, timeout time.Duration, fn func() (T, error)) (T, error) {
	var zero T
	g.mu.Lock()
	if g.running {
		since := g.since
		g.mu.Unlock()
		return zero, &StuckError{What: what, Since: since, Earlier: true}
	}
	start := time.Now()
	g.running, g.since = true, start
	g.mu.Unlock()

	type result struct {
		v   T
		err error
	}
	// Buffered: a call that returns after the deadline must not block.
	done := make(chan result, 1)
	go func() {
		var r result
		// The guard is released before the result is handed over, so that
		// the caller's next Run never sees its own finished call as stuck.
		defer func() {
			g.mu.Lock()
			g.running = false
			g.mu.Unlock()
			done <- r
		}()
		r.v, r.err = fn()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
	case <-ctx.Done():
	}
	return zero, &StuckError{What: what, Since: start, Waited: time.Since(start)}
}
