package backoff

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type exit struct {
	err  error
	wait time.Duration
}

// supervised runs a Supervisor on a fake clock whose run reports each start
// on starts and returns what results hands it.
func supervised(t *testing.T, initial, max time.Duration) (clk *clocktesting.FakeClock, starts chan struct{}, results chan func() (bool, error), exits chan exit, cancel func()) {
	t.Helper()
	clk = clocktesting.NewFakeClock(time.Now())
	starts, results, exits = make(chan struct{}), make(chan func() (bool, error)), make(chan exit, 1)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := Supervisor{Clock: clk, Initial: initial, Max: max, OnExit: func(err error, wait time.Duration) { exits <- exit{err, wait} }}
	go func() {
		defer close(done)
		s.Run(ctx, func(ctx context.Context) (bool, error) {
			select {
			case starts <- struct{}{}:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			select {
			case f := <-results:
				return f()
			case <-ctx.Done():
				return false, ctx.Err()
			}
		})
	}()
	cancel = func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return clk, starts, results, exits, cancel
}

func wantWait(t *testing.T, got, want time.Duration) {
	t.Helper()
	if got != want {
		t.Fatalf("wait %v, want %v", got, want)
	}
}

// A run that keeps failing is restarted only once each wait has passed on
// the clock, the waits doubling to the cap; a nil return counts as a
// failure too.
func TestSupervisorRestartsAfterGrowingWaitsOnTheClock(t *testing.T) {
	clk, starts, results, exits, cancel := supervised(t, time.Second, 4*time.Second)
	boom := errors.New("boom")
	for i, nominal := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		<-starts
		ret := boom
		if i == 1 {
			ret = nil
		}
		results <- func() (bool, error) { return false, ret }
		e := <-exits
		if want := map[bool]error{true: ErrReturned, false: boom}[i == 1]; !errors.Is(e.err, want) {
			t.Fatalf("exit %d: %v, want %v", i, e.err, want)
		}
		wantWait(t, e.wait, nominal)
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(e.wait - time.Millisecond)
		select {
		case <-starts:
			t.Fatalf("restart %d before its wait of %v had passed", i, e.wait)
		case <-time.After(20 * time.Millisecond):
		}
		clk.Step(time.Millisecond)
	}
	<-starts
	cancel()
}

// A run that made progress, or lasted the longest wait, starts the waits
// over.
func TestSupervisorStartsOverAfterAGoodRun(t *testing.T) {
	clk, starts, results, exits, cancel := supervised(t, time.Second, 8*time.Second)
	boom := errors.New("boom")
	fail := func() (bool, error) { return false, boom }
	step := func(e exit) {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(e.wait)
	}
	<-starts
	results <- fail
	step(<-exits) // 1 s
	<-starts
	results <- fail
	e := <-exits
	wantWait(t, e.wait, 2*time.Second)
	step(e)

	<-starts
	results <- func() (bool, error) { return true, boom }
	e = <-exits
	wantWait(t, e.wait, time.Second)
	step(e)

	<-starts
	results <- fail
	e = <-exits
	wantWait(t, e.wait, 2*time.Second)
	step(e)

	<-starts
	clk.Step(8 * time.Second) // a long run
	results <- fail
	e = <-exits
	wantWait(t, e.wait, time.Second)
	cancel()
}

// The context ending during a wait ends Run without another start.
func TestSupervisorStopsWhileWaiting(t *testing.T) {
	clk, starts, results, exits, cancel := supervised(t, time.Minute, time.Hour)
	<-starts
	results <- func() (bool, error) { return false, errors.New("boom") }
	<-exits
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	cancel()
}
