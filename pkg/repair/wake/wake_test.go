package wake

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestSchedulerFiresAtTheTimeOnAFakeClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	fired := make(chan string, 10)
	s := New(clk, func(k string) { fired <- k })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)

	s.At("a", t0.Add(time.Minute))
	s.At("b", t0.Add(2*time.Minute))
	s.At("c", t0.Add(time.Hour))
	s.Cancel("c")
	s.At("past", t0.Add(-time.Second))
	expect(t, fired, "past")

	waitForTimer(t, clk)
	clk.Step(time.Minute - time.Nanosecond)
	expectNothing(t, fired)
	clk.Step(time.Nanosecond)
	expect(t, fired, "a")

	// Replacing moves the time both ways.
	s.At("b", t0.Add(90*time.Second))
	waitForTimer(t, clk)
	clk.SetTime(t0.Add(90 * time.Second))
	expect(t, fired, "b")
	if s.Len() != 0 {
		t.Errorf("Len = %d after everything fired", s.Len())
	}
}

// A clock that jumps while the scheduler arms its timer must not delay the
// wake-up by the jump.
func TestSchedulerSurvivesClockJumps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	fired := make(chan string, 100)
	s := New(clk, func(k string) { fired <- k })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	for i := range 50 {
		target := t0.Add(time.Duration(i+1) * time.Second)
		s.At("k", target)
		clk.Step(500 * time.Millisecond) // races with arming
		clk.SetTime(target)
		expect(t, fired, "k")
		t0 = target
	}
}

func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("scheduler armed no timer")
		}
		time.Sleep(time.Millisecond)
	}
}

func expect(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("fired %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q did not fire", want)
	}
}

func expectNothing(t *testing.T, ch <-chan string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("%q fired early", got)
	case <-time.After(50 * time.Millisecond):
	}
}
