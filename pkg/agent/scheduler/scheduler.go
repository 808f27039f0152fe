// Package scheduler runs all periodic checks of the agent on one timer, with a
// random start offset per job, a minimum spacing between any two starts and a
// small worker pool, so that checks never wake together.
//
// A job's due times keep a fixed phase: the first run is due at a random
// offset in [0, Period/5] after the job is added, the next ones every Period
// after that. Starts are at least MinSpacing apart whatever the due times, so
// jobs due at the same instant start one after the other. A job whose
// previous run has not finished when it is due again is skipped until its next
// due time (and reported through OnSkip); a job is never run twice at once.
package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

const (
	// DefaultWorkers is the size of the worker pool when Options.Workers is 0.
	DefaultWorkers = 2
	// DefaultMinSpacing is the spacing between starts when Options.MinSpacing
	// is 0: more than 5 ms, so that at most two jobs start within any 10 ms
	// (window ends included).
	DefaultMinSpacing = 6 * time.Millisecond
)

// Job is a periodic job.
type Job struct {
	// Name identifies the job across Set calls; it must be unique.
	Name string
	// Period is the time between due times; it must be positive.
	Period time.Duration
	// Run does one run. Its context is the one given to Scheduler.Run; it
	// should return soon after that is done. A panic is not recovered.
	Run func(ctx context.Context)
}

// Options configure a Scheduler. The zero value is usable.
type Options struct {
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Workers is how many jobs may run at once; 0 means DefaultWorkers.
	Workers int
	// MinSpacing is the least time between two starts; 0 means
	// DefaultMinSpacing, a negative value disables spacing.
	MinSpacing time.Duration
	// Rand draws the start offsets; nil means a randomly seeded source. It is
	// only used under the scheduler's lock.
	Rand *rand.Rand
	// OnLag, when set, is called at each start with how late the start is
	// after the due time. It is called from the scheduling loop: keep it cheap.
	OnLag func(job string, lag time.Duration)
	// OnSkip, when set, is called when a job is due while its previous run is
	// still going, and that due time is skipped. Same caveat as OnLag.
	OnSkip func(job string)
}

// Scheduler runs periodic jobs. Set and Run may be called from any goroutine.
type Scheduler struct {
	clk        clock.Clock
	workers    int
	minSpacing time.Duration
	onLag      func(string, time.Duration)
	onSkip     func(string)

	mu        sync.Mutex
	rnd       *rand.Rand
	queue     queue           // every job, by next due time
	running   map[string]bool // job names with a run dispatched and not finished
	busy      int             // len(running)
	lastStart time.Time
	// wake is signalled, under mu, on every change the loop must look at (Set,
	// a run finishing). The loop drains it under mu before it looks.
	wake chan struct{}

	started atomic.Bool
	// observe, when set (tests only), is called by the loop each time it is
	// about to block.
	observe func(loopState)
}

// loopState is what the loop waits for when it blocks.
type loopState struct {
	next  time.Time     // when the timer fires; zero when it is not armed
	wait  time.Duration // next minus the time the loop read
	busy  int           // runs dispatched and not finished
	queue int           // jobs scheduled
}

// New returns a Scheduler with no jobs.
func New(opts Options) *Scheduler {
	s := &Scheduler{
		clk:        opts.Clock,
		workers:    opts.Workers,
		minSpacing: opts.MinSpacing,
		onLag:      opts.OnLag,
		onSkip:     opts.OnSkip,
		rnd:        opts.Rand,
		running:    map[string]bool{},
		wake:       make(chan struct{}, 1),
	}
	if s.clk == nil {
		s.clk = clock.RealClock{}
	}
	if s.workers <= 0 {
		s.workers = DefaultWorkers
	}
	switch {
	case s.minSpacing == 0:
		s.minSpacing = DefaultMinSpacing
	case s.minSpacing < 0:
		s.minSpacing = 0
	}
	if s.rnd == nil {
		s.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return s
}

// Set replaces the job set. A job whose Name and Period are unchanged keeps its
// due time (its phase), with the new Run; any other job is due at a new random
// offset from now. A removed job's run in progress is not interrupted, and a
// job re-added while it still runs is not started again before it finishes.
// An invalid set is rejected as a whole and the current one stays.
func (s *Scheduler) Set(jobs []Job) error {
	var errs []error
	seen := make(map[string]bool, len(jobs))
	for i, j := range jobs {
		switch {
		case j.Name == "":
			errs = append(errs, fmt.Errorf("job %d: name is required", i))
		case seen[j.Name]:
			errs = append(errs, fmt.Errorf("job %q: duplicate name", j.Name))
		}
		seen[j.Name] = true
		if j.Period <= 0 {
			errs = append(errs, fmt.Errorf("job %q: period must be positive, got %v", j.Name, j.Period))
		}
		if j.Run == nil {
			errs = append(errs, fmt.Errorf("job %q: Run is required", j.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := make(map[string]*entry, len(s.queue))
	for _, e := range s.queue {
		old[e.job.Name] = e
	}
	now := s.clk.Now()
	q := make(queue, 0, len(jobs))
	for _, j := range jobs {
		if e := old[j.Name]; e != nil && e.job.Period == j.Period {
			e.job = j
			q = append(q, e)
			continue
		}
		q = append(q, &entry{job: j, due: now.Add(s.offset(j.Period))})
	}
	heap.Init(&q)
	s.queue = q
	s.signal()
	return nil
}

// offset draws a start offset in [0, period/5]. Called with mu held.
func (s *Scheduler) offset(period time.Duration) time.Duration {
	return time.Duration(s.rnd.Int64N(int64(period/5) + 1))
}

// signal wakes the loop. Called with mu held.
func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dispatch is one run handed to a worker.
type dispatch struct {
	name string
	run  func(context.Context)
}

// Run runs the jobs until ctx is done, then waits for the runs in progress
// (which see ctx done) and returns nil. It may be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("scheduler: Run called more than once")
	}
	// At most s.workers runs are dispatched and not finished, so sending on
	// work never blocks.
	work := make(chan dispatch, s.workers)
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() { s.worker(ctx, work) })
	}
	defer func() {
		close(work)
		wg.Wait()
	}()

	timer := s.clk.NewTimer(time.Hour)
	stopTimer(timer)
	defer timer.Stop()
	for {
		st := s.dispatchDue(work)
		if !st.next.IsZero() {
			timer.Reset(st.wait)
		}
		if s.observe != nil {
			s.observe(st)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case <-s.wake:
		}
		stopTimer(timer)
	}
}

// stopTimer stops t and drains a fire that was not received, so that the next
// Reset starts clean (needed for fake timers; harmless for real ones).
func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}

// dispatchDue starts or skips every job that is due and may start now, and
// returns what the loop must wait for next.
func (s *Scheduler) dispatchDue(work chan<- dispatch) loopState {
	type event struct {
		name string
		lag  time.Duration
		skip bool
	}
	var events []event
	var st loopState

	s.mu.Lock()
	select {
	case <-s.wake:
	default:
	}
	for len(s.queue) > 0 {
		e := s.queue[0]
		now := s.clk.Now()
		start := !s.running[e.job.Name]
		at := e.due
		if start && !s.lastStart.IsZero() {
			if earliest := s.lastStart.Add(s.minSpacing); earliest.After(at) {
				at = earliest
			}
		}
		if at.After(now) {
			st.next, st.wait = at, at.Sub(now)
			break
		}
		if start && s.busy >= s.workers {
			break // a run finishing wakes the loop
		}
		due := e.due
		e.due = nextDue(due, e.job.Period, now)
		heap.Fix(&s.queue, 0)
		if !start {
			events = append(events, event{name: e.job.Name, skip: true})
			continue
		}
		s.running[e.job.Name] = true
		s.busy++
		s.lastStart = now
		work <- dispatch{name: e.job.Name, run: e.job.Run}
		events = append(events, event{name: e.job.Name, lag: now.Sub(due)})
	}
	st.busy, st.queue = s.busy, len(s.queue)
	s.mu.Unlock()

	for _, ev := range events {
		switch {
		case ev.skip && s.onSkip != nil:
			s.onSkip(ev.name)
		case !ev.skip && s.onLag != nil:
			s.onLag(ev.name, ev.lag)
		}
	}
	return st
}

// nextDue is the first due time after now in the phase of due.
func nextDue(due time.Time, period time.Duration, now time.Time) time.Time {
	next := due.Add(period)
	if next.After(now) {
		return next
	}
	return due.Add((now.Sub(due)/period + 1) * period)
}

func (s *Scheduler) worker(ctx context.Context, work <-chan dispatch) {
	for d := range work {
		if ctx.Err() == nil {
			d.run(ctx)
		}
		s.mu.Lock()
		delete(s.running, d.name)
		s.busy--
		s.signal()
		s.mu.Unlock()
	}
}

type entry struct {
	job Job
	due time.Time
}

// queue is a min-heap of entries by due time, then name (for determinism).
type queue []*entry

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if c := q[i].due.Compare(q[j].due); c != 0 {
		return c < 0
	}
	return q[i].job.Name < q[j].job.Name
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*entry)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
