// Package wake schedules reconciles at absolute times on an injected clock.
//
// controller-runtime's RequeueAfter waits on the real clock, which a test
// cannot move. Tolerations, drain deadlines and the 5-minute re-check of a
// blocked pool are all absolute times on the controller's clock, so the
// reconciler registers them here instead; when the clock (real or fake)
// reaches a time, the key is handed to the callback (which adds it to the
// controller's work queue).
package wake

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Scheduler holds at most one wake-up time per key.
type Scheduler[K comparable] struct {
	clock clock.Clock
	fire  func(K)

	mu      sync.Mutex
	at      map[K]time.Time
	changed chan struct{}
}

// New returns a Scheduler that calls fire(key) when the clock reaches the
// time set for key. Call Run to start it.
func New[K comparable](clk clock.Clock, fire func(K)) *Scheduler[K] {
	return &Scheduler[K]{clock: clk, fire: fire, at: map[K]time.Time{}, changed: make(chan struct{}, 1)}
}

// At sets the wake-up time of key, replacing an earlier setting: the latest
// reconcile of a key knows best when it needs the next one. A time that has
// passed fires at once.
func (s *Scheduler[K]) At(key K, t time.Time) {
	s.mu.Lock()
	s.at[key] = t
	s.mu.Unlock()
	s.poke()
}

// Cancel forgets key.
func (s *Scheduler[K]) Cancel(key K) {
	s.mu.Lock()
	_, ok := s.at[key]
	delete(s.at, key)
	s.mu.Unlock()
	if ok {
		s.poke()
	}
}

// Pending returns the wake-up time of key, if one is set.
func (s *Scheduler[K]) Pending(key K) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[key]
	return t, ok
}

// Len is the number of keys with a wake-up time.
func (s *Scheduler[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

func (s *Scheduler[K]) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run fires due keys until ctx ends.
func (s *Scheduler[K]) Run(ctx context.Context) {
	for {
		due, next := s.takeDue()
		for _, k := range due {
			s.fire(k)
		}
		var timer clock.Timer
		var timerC <-chan time.Time
		if !next.IsZero() {
			timer = s.arm(next)
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-s.changed:
		case <-timerC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// takeDue removes and returns the keys whose time has come, and the earliest
// time still pending (zero if none).
func (s *Scheduler[K]) takeDue() ([]K, time.Time) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []K
	var next time.Time
	for k, t := range s.at {
		if !t.After(now) {
			due = append(due, k)
			delete(s.at, k)
			continue
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return due, next
}

// arm returns a timer that fires at t. The clock interface only offers
// relative timers: if the clock jumps between reading it and arming the
// timer (only a fake clock does that, by more than a millisecond), the timer
// would fire late by the jump, so it is armed again.
func (s *Scheduler[K]) arm(t time.Time) clock.Timer {
	for {
		before := s.clock.Now()
		timer := s.clock.NewTimer(t.Sub(before))
		if s.clock.Since(before) <= time.Millisecond {
			return timer
		}
		timer.Stop()
	}
}
