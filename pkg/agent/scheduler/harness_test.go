package scheduler

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// harness drives a Scheduler on a fake clock deterministically: the loop
// reports each state it blocks in, and the harness moves the clock only while
// the loop is blocked and no run is in flight (or the runs in flight are held
// by the test).
type harness struct {
	tb testing.TB
	fc *clocktesting.FakeClock
	s  *Scheduler

	mu      sync.Mutex
	st      loopState
	seq     uint64        // states published
	seen    uint64        // seq when the test last acted
	changed chan struct{} // closed at each publish

	cancel context.CancelFunc
	done   chan error
}

func newHarness(tb testing.TB, opts Options) *harness {
	h := &harness{tb: tb, fc: clocktesting.NewFakeClock(t0), changed: make(chan struct{})}
	opts.Clock = h.fc
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2))
	}
	h.s = New(opts)
	h.s.observe = h.publish
	return h
}

func (h *harness) publish(st loopState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st = st
	h.seq++
	close(h.changed)
	h.changed = make(chan struct{})
}

// start runs the scheduler until the test ends or stop is called.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.s.Run(ctx) }()
	h.tb.Cleanup(func() { h.stop() })
}

// stop cancels Run and returns its result.
func (h *harness) stop() error {
	h.cancel()
	select {
	case err := <-h.done:
		h.done <- err // keep it for a second stop
		return err
	case <-time.After(10 * time.Second):
		h.tb.Fatal("Run did not return after cancel")
		return nil
	}
}

// act marks that the test is about to do something the loop reacts to, so
// that await waits for a state published after it.
func (h *harness) act() {
	h.mu.Lock()
	h.seen = h.seq
	h.mu.Unlock()
}

// await waits until the loop blocks, after the last act, in a state that
// satisfies ok.
func (h *harness) await(ok func(loopState) bool) loopState {
	h.tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		st, fresh, ch := h.st, h.seq > h.seen, h.changed
		h.mu.Unlock()
		if fresh && ok(st) {
			return st
		}
		select {
		case <-ch:
		case <-timeout:
			h.tb.Fatalf("loop did not reach the expected state; last: %+v fresh=%v", st, fresh)
		}
	}
}

func idle(st loopState) bool { return st.busy == 0 }

// settle waits until the loop blocks with no run in flight.
func (h *harness) settle() loopState {
	h.tb.Helper()
	return h.await(idle)
}

// advanceTo moves the clock to t through every timer fire on the way, letting
// all runs (which must not block) finish at each.
func (h *harness) advanceTo(t time.Time) {
	h.tb.Helper()
	h.advance(t, 0)
}

// advance is advanceTo with held runs in flight throughout, held by the test.
func (h *harness) advance(t time.Time, held int) {
	h.tb.Helper()
	quiet := func(st loopState) bool { return st.busy == held }
	st := h.await(quiet)
	for !st.next.IsZero() && !st.next.After(t) {
		h.act()
		h.fc.SetTime(st.next)
		st = h.await(quiet)
	}
	h.fc.SetTime(t)
}

// setTime moves the clock to t in one jump, whatever runs are in flight (the
// test must hold them). It returns whether the loop will react.
func (h *harness) setTime(t time.Time) bool {
	h.mu.Lock()
	st := h.st
	h.mu.Unlock()
	fires := !st.next.IsZero() && !st.next.After(t)
	if fires {
		h.act()
	}
	h.fc.SetTime(t)
	return fires
}

// recorder records the start times of runs.
type recorder struct {
	clk    *clocktesting.FakeClock
	mu     sync.Mutex
	starts map[string][]time.Time
	all    []time.Time
}

func newRecorder(clk *clocktesting.FakeClock) *recorder {
	return &recorder{clk: clk, starts: map[string][]time.Time{}}
}

func (r *recorder) job(name string, period time.Duration) Job {
	return Job{Name: name, Period: period, Run: func(context.Context) {
		now := r.clk.Now()
		r.mu.Lock()
		r.starts[name] = append(r.starts[name], now)
		r.all = append(r.all, now)
		r.mu.Unlock()
	}}
}

func (r *recorder) get(name string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.starts[name]...)
}

// maxInWindow is the largest number of times within any closed window
// [t, t+w]. times must be sorted.
func maxInWindow(times []time.Time, w time.Duration) int {
	best, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) > w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}
