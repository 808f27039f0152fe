package backoff

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestDelaysGrowToTheCapWithBoundedJitter(t *testing.T) {
	r := New(200*time.Millisecond, 5*time.Second)
	nominal := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for round := 0; round < 200; round++ {
		r.Reset()
		for i, want := range nominal {
			got := r.Next()
			if got < want || got > time.Duration(float64(want)*(1+Jitter)) {
				t.Fatalf("round %d, delay %d: %v, want within [%v, %v]", round, i, got, want, time.Duration(float64(want)*(1+Jitter)))
			}
		}
	}
}

func TestMaxAttempts(t *testing.T) {
	// 0.2+0.4+0.8+1.6+3.2 = 6.2 s, then every 5 s: 10 more by 56.2 s.
	if got := MaxAttempts(200*time.Millisecond, 5*time.Second, time.Minute); got != 16 {
		t.Fatalf("MaxAttempts = %d, want 16", got)
	}
	if got := MaxAttempts(time.Second, time.Second, 0); got != 1 {
		t.Fatalf("no time: %d attempts", got)
	}
}

func TestWaitUsesTheClockAndStopsWithTheContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(time.Second, time.Minute)
	done := make(chan bool)
	go func() { done <- r.Wait(context.Background(), clk) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(1200 * time.Millisecond) // the longest first delay
	if !<-done {
		t.Fatal("Wait returned false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- r.Wait(ctx, clk) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-done {
		t.Fatal("Wait returned true after the context ended")
	}
}

func TestPerItemDelaysGrowPerItemToTheCapAndStartOver(t *testing.T) {
	p := &PerItem[string]{Initial: time.Second, Max: 30 * time.Second}
	var last time.Duration
	for i := range 10 {
		last = p.When("a")
		if i == 0 && (last < time.Second || last > 1200*time.Millisecond) {
			t.Fatalf("first delay %v", last)
		}
	}
	if last < 30*time.Second || last > 36*time.Second || p.NumRequeues("a") != 10 {
		t.Fatalf("tenth delay %v (requeues %d), want the cap 30 s with at most 20%% jitter", last, p.NumRequeues("a"))
	}
	if d := p.When("b"); d > 1200*time.Millisecond {
		t.Fatalf("another item's first delay %v", d)
	}
	p.Forget("a")
	if d := p.When("a"); d > 1200*time.Millisecond || p.NumRequeues("a") != 1 {
		t.Fatalf("after Forget: %v, %d requeues", d, p.NumRequeues("a"))
	}
}
