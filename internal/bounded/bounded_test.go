package bounded

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunReturnsResult(t *testing.T) {
	var g Guard
	v, err := Run(context.Background(), &g, "op", time.Second, func() (int, error) { return 42, nil })
	if v != 42 || err != nil {
		t.Fatalf("got %v, %v", v, err)
	}
	boom := errors.New("boom")
	if _, err := Run(context.Background(), &g, "op", time.Second, func() (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if busy, _ := g.Busy(); busy {
		t.Fatal("guard busy after the call returned")
	}
}

// TestBlockedCallIsNotStartedTwice is the contract with a blocking fake: the
// first Run times out, later Runs return at once without calling fn while the
// first call is still blocked, and after it returns calls go through again.
func TestBlockedCallIsNotStartedTwice(t *testing.T) {
	var g Guard
	release := make(chan struct{})
	var calls atomic.Int32
	block := func() (string, error) {
		calls.Add(1)
		<-release
		return "late", nil
	}
	start := time.Now()
	_, err := Run(context.Background(), &g, "statfs /mnt/nfs", 50*time.Millisecond, block)
	var stuck *StuckError
	if !errors.As(err, &stuck) || stuck.Earlier || !errors.Is(err, ErrTimeout) {
		t.Fatalf("first call: want a timeout, got %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("Run waited far past its timeout")
	}
	first := stuck.Since
	for range 5 {
		_, err = Run(context.Background(), &g, "statfs /mnt/nfs", time.Hour, block)
		if !errors.As(err, &stuck) || !stuck.Earlier || !stuck.Since.Equal(first) {
			t.Fatalf("later call: want 'still blocked', got %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn called %d times while blocked, want 1", n)
	}
	close(release)
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		if busy, _ := g.Busy(); !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("guard still busy after the call returned")
		}
	}
	v, err := Run(context.Background(), &g, "statfs /mnt/nfs", time.Second, func() (string, error) { return "ok", nil })
	if v != "ok" || err != nil {
		t.Fatalf("after recovery: %v, %v", v, err)
	}
	t.Logf("messages: %v", stuck)
}

func TestContextEndsWait(t *testing.T) {
	var g Guard
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	defer close(release)
	_, err := Run(ctx, &g, "op", time.Hour, func() (int, error) { <-release; return 0, nil })
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v", err)
	}
}

// TestBackToBackCallsAreNotStuck: a call that returned must never make the
// next one look stuck (the guard is released before the result is handed
// over).
func TestBackToBackCallsAreNotStuck(t *testing.T) {
	var g Guard
	for i := range 2000 {
		if _, err := Run(context.Background(), &g, "op", time.Second, func() (int, error) { return i, nil }); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}
