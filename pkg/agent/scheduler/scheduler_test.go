package scheduler

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStartOffsetsWithinFifthOfPeriod(t *testing.T) {
	h := newHarness(t, Options{})
	periods := []time.Duration{time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute}
	var jobs []Job
	for i := range 200 {
		jobs = append(jobs, Job{Name: fmt.Sprint("j", i), Period: periods[i%len(periods)], Run: func(context.Context) {}})
	}
	if err := h.s.Set(jobs); err != nil {
		t.Fatal(err)
	}
	offsets := map[time.Duration]bool{}
	for _, e := range h.s.queue {
		off := e.due.Sub(t0)
		if off < 0 || off > e.job.Period/5 {
			t.Errorf("%s: offset %v outside [0, %v]", e.job.Name, off, e.job.Period/5)
		}
		offsets[off] = true
	}
	if len(offsets) < 190 {
		t.Errorf("only %d distinct offsets for 200 jobs: not random", len(offsets))
	}
}

func TestFirstStartsWithinOffsetAndPeriodsKept(t *testing.T) {
	h := newHarness(t, Options{})
	rec := newRecorder(h.fc)
	periods := map[string]time.Duration{"a": 10 * time.Second, "b": 30 * time.Second, "c": time.Minute, "d": 7 * time.Second}
	var jobs []Job
	for _, name := range slices.Sorted(mapsKeys(periods)) {
		jobs = append(jobs, rec.job(name, periods[name]))
	}
	if err := h.s.Set(jobs); err != nil {
		t.Fatal(err)
	}
	h.start()
	end := t0.Add(time.Hour)
	h.advanceTo(end)

	// Four jobs, spaced starts: a start is at most 3 spacings late.
	const slack = 3 * DefaultMinSpacing
	for name, p := range periods {
		starts := rec.get(name)
		if len(starts) == 0 {
			t.Fatalf("%s never ran", name)
		}
		if off := starts[0].Sub(t0); off < 0 || off > p/5+slack {
			t.Errorf("%s: first start at +%v, want within [0, %v]", name, off, p/5)
		}
		// Due times are first + k*period; the first start has no lag in a
		// quiet scheduler only if nothing else was due, so take the phase from
		// the job's due time instead.
		phase := starts[0]
		for k, s := range starts {
			due := phase.Add(time.Duration(k) * p)
			if lag := s.Sub(due); lag < -slack || lag > slack {
				t.Errorf("%s run %d: started %v after due (phase drift)", name, k, lag)
				break
			}
		}
		if want := int(end.Sub(phase)/p) + 1; len(starts) < want-1 || len(starts) > want {
			t.Errorf("%s: %d runs in an hour, want %d", name, len(starts), want)
		}
	}
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dueAll makes every job due at t (tests only).
func (s *Scheduler) dueAll(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.queue {
		e.due = t
	}
	heap.Init(&s.queue)
}

func TestJobsDueTogetherStartSpaced(t *testing.T) {
	var mu sync.Mutex
	lags := map[string]time.Duration{}
	h := newHarness(t, Options{Workers: 4, OnLag: func(job string, lag time.Duration) {
		mu.Lock()
		lags[job] = lag
		mu.Unlock()
	}})
	rec := newRecorder(h.fc)
	var jobs []Job
	for i := range 10 {
		jobs = append(jobs, rec.job(fmt.Sprint("j", i), time.Minute))
	}
	if err := h.s.Set(jobs); err != nil {
		t.Fatal(err)
	}
	h.s.dueAll(t0.Add(time.Second))
	h.start()
	h.advanceTo(t0.Add(2 * time.Second))

	for i := range 10 {
		name := fmt.Sprint("j", i)
		want := t0.Add(time.Second + time.Duration(i)*DefaultMinSpacing) // ties go by name
		if got := rec.get(name); len(got) != 1 || !got[0].Equal(want) {
			t.Errorf("%s started at %v, want once at %v", name, got, want)
		}
		mu.Lock()
		if lag := lags[name]; lag != time.Duration(i)*DefaultMinSpacing {
			t.Errorf("%s: lag %v, want %v", name, lag, time.Duration(i)*DefaultMinSpacing)
		}
		mu.Unlock()
	}
	if n := maxInWindow(rec.all, 10*time.Millisecond); n > 2 {
		t.Errorf("%d starts within 10ms", n)
	}
}

func TestSpacingCanBeDisabled(t *testing.T) {
	h := newHarness(t, Options{Workers: 3, MinSpacing: -1})
	rec := newRecorder(h.fc)
	if err := h.s.Set([]Job{rec.job("a", time.Minute), rec.job("b", time.Minute), rec.job("c", time.Minute)}); err != nil {
		t.Fatal(err)
	}
	h.s.dueAll(t0.Add(time.Second))
	h.start()
	h.advanceTo(t0.Add(2 * time.Second))
	for _, name := range []string{"a", "b", "c"} {
		if got := rec.get(name); len(got) != 1 || !got[0].Equal(t0.Add(time.Second)) {
			t.Errorf("%s started at %v, want once at +1s", name, got)
		}
	}
}

// holdJob is a job whose runs block until the test releases them.
type holdJob struct {
	started chan time.Time
	release chan struct{}
	running atomic.Int32
	maxConc atomic.Int32
}

func newHoldJob() *holdJob {
	return &holdJob{started: make(chan time.Time, 100), release: make(chan struct{})}
}

func (j *holdJob) job(h *harness, name string, period time.Duration) Job {
	return Job{Name: name, Period: period, Run: func(ctx context.Context) {
		n := j.running.Add(1)
		defer j.running.Add(-1)
		for {
			m := j.maxConc.Load()
			if n <= m || j.maxConc.CompareAndSwap(m, n) {
				break
			}
		}
		j.started <- h.fc.Now()
		select {
		case <-j.release:
		case <-ctx.Done():
		}
	}}
}

// waitStarts receives n start times from j.started.
func (j *holdJob) waitStarts(tb testing.TB, n int) []time.Time {
	tb.Helper()
	var got []time.Time
	for range n {
		select {
		case s := <-j.started:
			got = append(got, s)
		case <-time.After(10 * time.Second):
			tb.Fatalf("only %d of %d runs started", len(got), n)
		}
	}
	return got
}

func TestSlowJobIsNotOverlapped(t *testing.T) {
	var skips atomic.Int32
	h := newHarness(t, Options{OnSkip: func(job string) {
		if job == "slow" {
			skips.Add(1)
		}
	}})
	slow := newHoldJob()
	rec := newRecorder(h.fc)
	if err := h.s.Set([]Job{slow.job(h, "slow", time.Second), rec.job("fast", time.Second)}); err != nil {
		t.Fatal(err)
	}
	h.s.dueAll(t0)
	h.start()
	// fast starts at t0, slow one spacing later and is held.
	h.settle()
	h.setTime(t0.Add(DefaultMinSpacing))
	h.await(func(st loopState) bool { return st.busy == 1 })
	firstStart := slow.waitStarts(t, 1)[0]
	if want := t0.Add(DefaultMinSpacing); !firstStart.Equal(want) {
		t.Fatalf("slow started at %v, want %v", firstStart, want)
	}

	// Three due times go by while it is held: each is skipped.
	h.advance(t0.Add(3500*time.Millisecond), 1)
	if got := skips.Load(); got != 3 {
		t.Errorf("skips = %d, want 3", got)
	}
	if n := len(slow.started); n != 0 {
		t.Errorf("slow started %d more times while running", n)
	}
	if got := len(rec.get("fast")); got != 4 {
		t.Errorf("fast ran %d times while slow was held, want 4", got)
	}

	// Released, it runs again at its next due time in phase, not at once.
	h.act()
	close(slow.release)
	h.advanceTo(t0.Add(4500 * time.Millisecond))
	again := slow.waitStarts(t, 1)[0]
	if d := again.Sub(firstStart); d < 4*time.Second-DefaultMinSpacing || d > 4*time.Second+DefaultMinSpacing {
		t.Errorf("slow ran again %v after its first start, want 4s (in phase)", d)
	}
	if n := len(slow.started); n != 0 {
		t.Errorf("slow started %d extra times", n)
	}
	if got := slow.maxConc.Load(); got != 1 {
		t.Errorf("max concurrent runs of slow = %d, want 1", got)
	}
}

func TestWorkerPoolLimitsConcurrency(t *testing.T) {
	var mu sync.Mutex
	lags := map[string]time.Duration{}
	h := newHarness(t, Options{Workers: 2, OnLag: func(job string, lag time.Duration) {
		mu.Lock()
		lags[job] = lag
		mu.Unlock()
	}})
	held := newHoldJob()
	var jobs []Job
	for i := range 4 {
		jobs = append(jobs, held.job(h, fmt.Sprint("j", i), time.Hour))
	}
	if err := h.s.Set(jobs); err != nil {
		t.Fatal(err)
	}
	h.s.dueAll(t0)
	h.start()
	// j0 starts at t0, j1 one spacing later; j2 and j3 wait for a worker.
	h.await(func(st loopState) bool { return st.busy == 1 })
	h.setTime(t0.Add(DefaultMinSpacing))
	h.advance(t0.Add(time.Second), 2)
	held.waitStarts(t, 2)
	if n := len(held.started); n != 0 {
		t.Fatalf("%d more runs started with both workers busy", n)
	}
	if st := h.await(func(loopState) bool { return true }); !st.next.IsZero() {
		t.Errorf("timer armed at %v while waiting for a worker", st.next)
	}

	h.act()
	held.release <- struct{}{}
	if got := held.waitStarts(t, 1)[0]; !got.Equal(t0.Add(time.Second)) {
		t.Errorf("j2 started at %v, want as soon as a worker was free (+1s)", got)
	}
	h.await(func(st loopState) bool { return st.busy == 2 })
	mu.Lock()
	if got := lags["j2"]; got != time.Second {
		t.Errorf("j2 lag %v, want 1s", got)
	}
	mu.Unlock()
	if n := len(held.started); n != 0 {
		t.Fatalf("%d more runs started with both workers busy", n)
	}
	h.act()
	close(held.release)
	h.advanceTo(t0.Add(2 * time.Second))
	held.waitStarts(t, 1)
	if got := held.maxConc.Load(); got != 2 {
		t.Errorf("max concurrency %d, want 2", got)
	}
}

func TestSetKeepsPhaseOfUnchangedJobs(t *testing.T) {
	h := newHarness(t, Options{})
	rec := newRecorder(h.fc)
	if err := h.s.Set([]Job{rec.job("a", 10*time.Second), rec.job("b", 30*time.Second), rec.job("p", 20*time.Second)}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.advanceTo(t0.Add(95 * time.Second))
	dueOf := func(name string) time.Time {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		for _, e := range h.s.queue {
			if e.job.Name == name {
				return e.due
			}
		}
		return time.Time{}
	}
	aDue := dueOf("a")
	pDue := dueOf("p")
	bRuns := len(rec.get("b"))

	// a is unchanged (new Run), b is removed, c is added, p changes period.
	var newA atomic.Int32
	h.act()
	err := h.s.Set([]Job{
		{Name: "a", Period: 10 * time.Second, Run: func(context.Context) { newA.Add(1) }},
		rec.job("c", 20*time.Second),
		rec.job("p", 40*time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	now := h.fc.Now()
	if got := dueOf("a"); !got.Equal(aDue) {
		t.Errorf("a's due time moved from %v to %v", aDue, got)
	}
	if got := dueOf("c"); got.Before(now) || got.After(now.Add(4*time.Second)) {
		t.Errorf("c due at %v, want within 4s of %v", got, now)
	}
	if got := dueOf("p"); got.Equal(pDue) || got.Before(now) || got.After(now.Add(8*time.Second)) {
		t.Errorf("p due at %v (was %v), want a new offset within 8s of %v", got, pDue, now)
	}
	if got := dueOf("b"); !got.IsZero() {
		t.Errorf("b still scheduled at %v", got)
	}

	h.advanceTo(t0.Add(200 * time.Second))
	if got := len(rec.get("b")); got != bRuns {
		t.Errorf("b ran %d times after removal", got-bRuns)
	}
	if n := len(rec.get("c")); n < 5 {
		t.Errorf("c ran %d times in 105s, want ≥ 5", n)
	}
	if n := newA.Load(); n < 10 || n > 11 {
		t.Errorf("new a ran %d times in 105s, want 10 or 11", n)
	}
	// a's runs before and after Set are in one phase.
	first := rec.get("a")[0]
	if d := aDue.Sub(first); d%(10*time.Second) != 0 {
		t.Errorf("a's phase changed: due %v is %v after its first start", aDue, d)
	}
}

func TestSetRejectsInvalidJobsAndKeepsCurrent(t *testing.T) {
	s := New(Options{})
	run := func(context.Context) {}
	if err := s.Set([]Job{{Name: "ok", Period: time.Second, Run: run}}); err != nil {
		t.Fatal(err)
	}
	err := s.Set([]Job{
		{Name: "", Period: time.Second, Run: run},
		{Name: "x", Period: 0, Run: run},
		{Name: "y", Period: time.Second},
		{Name: "y", Period: time.Second, Run: run},
	})
	if err == nil {
		t.Fatal("invalid set accepted")
	}
	for _, want := range []string{"job 0: name is required", `job "x": period must be positive`, `job "y": Run is required`, `job "y": duplicate name`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if len(s.queue) != 1 || s.queue[0].job.Name != "ok" {
		t.Errorf("current set changed after a rejected Set: %v", s.queue)
	}
}

func TestRunReturnsOnCancelAfterRunningJobsFinish(t *testing.T) {
	h := newHarness(t, Options{})
	var finished atomic.Bool
	release := make(chan struct{})
	started := make(chan struct{})
	err := h.s.Set([]Job{{Name: "a", Period: time.Second, Run: func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		<-release
		finished.Store(true)
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h.s.dueAll(t0)
	h.start()
	<-started
	h.cancel()
	select {
	case <-h.done:
		t.Fatal("Run returned while a job was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := h.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if !finished.Load() {
		t.Error("Run returned before the running job finished")
	}
	if err := h.s.Run(context.Background()); err == nil {
		t.Error("second Run accepted")
	}
}

func TestNextDue(t *testing.T) {
	p := 10 * time.Second
	for _, tc := range []struct {
		now  time.Duration
		want time.Duration
	}{
		{0, 10 * time.Second},
		{3 * time.Second, 10 * time.Second},
		{10 * time.Second, 20 * time.Second},
		{25 * time.Second, 30 * time.Second},
		{time.Hour, time.Hour + 10*time.Second},
	} {
		if got := nextDue(t0, p, t0.Add(tc.now)).Sub(t0); got != tc.want {
			t.Errorf("nextDue(now=+%v) = +%v, want +%v", tc.now, got, tc.want)
		}
	}
}

// simulate runs jobs with the given periods on a fake clock for d and returns
// the sorted start times and the largest lag.
func simulate(tb testing.TB, seed uint64, periods []time.Duration, d time.Duration) ([]time.Time, time.Duration) {
	var maxLag time.Duration
	h := newHarness(tb, Options{
		Rand:  rand.New(rand.NewPCG(seed, seed)),
		OnLag: func(_ string, lag time.Duration) { maxLag = max(maxLag, lag) }, // loop goroutine only
	})
	rec := newRecorder(h.fc)
	var jobs []Job
	for i, p := range periods {
		jobs = append(jobs, rec.job(fmt.Sprint("check-", i), p))
	}
	if err := h.s.Set(jobs); err != nil {
		tb.Fatal(err)
	}
	h.start()
	h.advanceTo(t0.Add(d))
	h.settle()
	if err := h.stop(); err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(rec.all, time.Time.Compare)
	return rec.all, maxLag
}

// fleetPeriods is 50 checks with realistic periods.
func fleetPeriods() []time.Duration {
	var ps []time.Duration
	for i := range 50 {
		ps = append(ps, []time.Duration{10 * time.Second, 30 * time.Second, time.Minute}[i%3])
	}
	return ps
}

func TestFiftyChecksNeverWakeTogether(t *testing.T) {
	d := 10 * time.Minute
	if testing.Short() {
		d = 2 * time.Minute
	}
	for seed := range uint64(3) {
		starts, maxLag := simulate(t, seed, fleetPeriods(), d)
		// 17 checks every 10s, 17 every 30s, 16 every minute.
		if want := int(d/(10*time.Second))*17 + int(d/(30*time.Second))*17 + int(d/time.Minute)*16; len(starts) < want-50 || len(starts) > want+50 {
			t.Errorf("seed %d: %d starts, want about %d", seed, len(starts), want)
		}
		if n := maxInWindow(starts, 10*time.Millisecond); n > 2 {
			t.Errorf("seed %d: %d starts within 10ms, want ≤ 2", seed, n)
		}
		if maxLag > 50*DefaultMinSpacing {
			t.Errorf("seed %d: max lag %v", seed, maxLag)
		}
	}
}

// BenchmarkSimulatedHour runs 50 checks (10s/30s/60s) for a simulated hour on
// the fake clock and reports the most starts within any 10 ms window (target
// ≤ 2) and the largest start lag.
func BenchmarkSimulatedHour(b *testing.B) {
	worst, worstLag, starts := 0, time.Duration(0), 0
	var seed uint64
	for b.Loop() {
		all, lag := simulate(b, seed, fleetPeriods(), time.Hour)
		seed++
		worst = max(worst, maxInWindow(all, 10*time.Millisecond))
		worstLag = max(worstLag, lag)
		starts = len(all)
	}
	b.ReportMetric(float64(worst), "max-starts/10ms")
	b.ReportMetric(float64(worstLag.Microseconds())/1000, "max-lag-ms")
	b.ReportMetric(float64(starts), "starts/hour")
}

// BenchmarkDispatchRealClock measures the scheduler's own cost per run on the
// real clock: jobs always due, no spacing, empty runs.
func BenchmarkDispatchRealClock(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprint("workers=", workers), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var runs atomic.Int64
			n := int64(b.N)
			s := New(Options{Workers: workers, MinSpacing: -1})
			var jobs []Job
			for i := range 16 {
				jobs = append(jobs, Job{Name: fmt.Sprint("j", i), Period: time.Nanosecond, Run: func(context.Context) {
					if runs.Add(1) == n {
						cancel()
					}
				}})
			}
			if err := s.Set(jobs); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			_ = s.Run(ctx)
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs.Load()), "ns/dispatch")
		})
	}
}
