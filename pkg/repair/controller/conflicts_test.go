package controller

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/backoff"
)

func TestConflictRetriesBackOffPerNode(t *testing.T) {
	var c conflictRetries
	var last time.Duration
	for i := 0; i < 12; i++ {
		d := c.next("a")
		if i == 0 && d > time.Duration(float64(conflictRetryInitial)*(1+backoff.Jitter)) {
			t.Fatalf("first retry after %v", d)
		}
		if d > time.Duration(float64(conflictRetryMax)*(1+backoff.Jitter)) {
			t.Fatalf("retry %d after %v, over the cap", i, d)
		}
		last = d
	}
	if last < conflictRetryMax {
		t.Fatalf("after 12 conflicts the delay is %v, want the cap %v", last, conflictRetryMax)
	}
	if d := c.next("b"); d > time.Duration(float64(conflictRetryInitial)*(1+backoff.Jitter)) {
		t.Fatalf("another node's first retry after %v", d)
	}
	c.forget("a")
	if d := c.next("a"); d > time.Duration(float64(conflictRetryInitial)*(1+backoff.Jitter)) {
		t.Fatalf("after a success the first retry is after %v", d)
	}
}
