package apigate

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/backoff"
)

// server is a scripted transport: it answers 200 while up, and fails as
// the outage says while down.
type server struct {
	mu     sync.Mutex
	fail   func() (*http.Response, error)
	sent   atomic.Int64
	sentAt []time.Time
	clk    *clocktesting.FakeClock
}

func (s *server) RoundTrip(*http.Request) (*http.Response, error) {
	s.sent.Add(1)
	s.mu.Lock()
	s.sentAt = append(s.sentAt, s.clk.Now())
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

func (s *server) set(fail func() (*http.Response, error)) {
	s.mu.Lock()
	s.fail = fail
	s.mu.Unlock()
}

func eof() (*http.Response, error) { return nil, io.EOF }

// callers starts n clients that send through g without any backoff of
// their own (the worst caller: a failed request is sent again at once)
// until ctx ends, and counts their successes.
func callers(ctx context.Context, g *Gate, rt http.RoundTripper, n int, ok *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	c := &http.Client{Transport: g.Wrap(rt)}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.invalid/", nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
					}
				}
			}
		}()
	}
	return &wg
}

// settle waits (real time, briefly) until every caller is held by the gate
// and none is out: the moment to move the fake clock.
func settle(t *testing.T, g *Gate, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		if held, done := g.Settled(); held == n && done {
			return
		}
		if time.Now().After(deadline) {
			held, done := g.Settled()
			t.Fatalf("callers never settled: %d held of %d, none out: %v", held, n, done)
		}
	}
}

// Through a 60 s outage, seven callers that retry at once send what one
// paced prober would: the first failures, then one request per delay
// (0.5 s doubling to 4 s, each up to 20% longer). When the server is back,
// every held caller gets through within one ceiling.
func TestAnOutageCostsOneProbeAtATime(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func() (*http.Response, error)
	}{
		{"connection closed", eof},
		{"connection refused", func() (*http.Response, error) {
			return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}},
		{"a load balancer without servers", func() (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			srv := &server{clk: clk}
			var changes []bool
			g := New(Options{Clock: clk, OnChange: func(down bool, _ error) { changes = append(changes, down) }})
			ctx, cancel := context.WithCancel(context.Background())
			var ok atomic.Int64
			const n = 7
			srv.set(tc.fail)
			wg := callers(ctx, g, srv, n, &ok)
			settle(t, g, n)
			start := clk.Now()
			for clk.Since(start) < time.Minute {
				clk.Step(10 * time.Millisecond)
				settle(t, g, n)
			}
			sent := int(srv.sent.Load())
			bound := backoff.MaxAttempts(DefaultInitial, DefaultMax, time.Minute) + n
			t.Logf("%d requests sent in a minute of outage by %d callers that retry at once (bound %d)", sent, n, bound)
			if sent > bound {
				t.Errorf("%d requests in a minute of outage, more than %d", sent, bound)
			}
			// The fewest: every delay the longest the jitter makes it.
			longest := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + backoff.Jitter)) }
			if least := backoff.MaxAttempts(longest(DefaultInitial), longest(DefaultMax), time.Minute) - 1; sent < least {
				t.Errorf("only %d requests in a minute of outage: the gate stopped probing", sent)
			}
			// Once backed off, probes are at least the ceiling apart and at
			// most 20% more.
			srv.mu.Lock()
			at := append([]time.Time(nil), srv.sentAt...)
			srv.mu.Unlock()
			for i := len(at) - 5; i < len(at); i++ {
				gap := at[i].Sub(at[i-1])
				if gap < DefaultMax || gap > time.Duration(float64(DefaultMax)*(1+backoff.Jitter))+10*time.Millisecond {
					t.Errorf("probe %d came %v after the one before, want within [%v, %v]", i, gap, DefaultMax, time.Duration(float64(DefaultMax)*(1+backoff.Jitter)))
				}
			}

			srv.set(nil)
			back := clk.Now()
			for ok.Load() < n {
				if clk.Since(back) > time.Duration(float64(DefaultMax)*(1+backoff.Jitter))+10*time.Millisecond {
					t.Fatalf("%d of %d callers through %v after the server came back", ok.Load(), n, clk.Since(back))
				}
				clk.Step(10 * time.Millisecond)
				time.Sleep(time.Millisecond)
			}
			t.Logf("every caller through %v after the server came back", clk.Since(back))
			cancel()
			wg.Wait()
			if len(changes) != 2 || !changes[0] || changes[1] {
				t.Errorf("changes %v, want down then up", changes)
			}
		})
	}
}

// Answers of the server, errors included, keep the gate open, and so does
// a request its caller gave up on; only what says no server was reached
// closes it.
func TestOnlyAnUnreachedServerClosesTheGate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		err    error
		cancel bool
		closes bool
	}{
		{"not found", http.StatusNotFound, nil, false, false},
		{"conflict", http.StatusConflict, nil, false, false},
		{"too many requests (the server paces itself)", http.StatusTooManyRequests, nil, false, false},
		{"internal error", http.StatusInternalServerError, nil, false, false},
		{"bad gateway", http.StatusBadGateway, nil, false, true},
		{"service unavailable", http.StatusServiceUnavailable, nil, false, true},
		{"gateway timeout", http.StatusGatewayTimeout, nil, false, true},
		{"reset", 0, errors.New("read: connection reset by peer"), false, true},
		{"the caller gave up", 0, context.Canceled, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			srv := &server{clk: clk}
			srv.set(func() (*http.Response, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				return &http.Response{StatusCode: tc.status, Body: http.NoBody}, nil
			})
			g := New(Options{Clock: clk})
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.invalid/", nil)
			if resp, err := g.Wrap(srv).RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			cancel()
			if g.Down() != tc.closes {
				t.Errorf("gate down: %v, want %v", g.Down(), tc.closes)
			}
		})
	}
}

// A held request ends with its context; the gate stays as it was.
func TestAHeldRequestEndsWithItsContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	srv := &server{clk: clk}
	srv.set(eof)
	g := New(Options{Clock: clk})
	rt := g.Wrap(srv)
	req, _ := http.NewRequest(http.MethodGet, "http://api.invalid/", nil)
	if _, err := rt.RoundTrip(req); err == nil || !g.Down() {
		t.Fatalf("first failure: %v, down %v", err, g.Down())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.invalid/", nil)
		_, err := rt.RoundTrip(req)
		done <- err
	}()
	settle(t, g, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("held request ended with %v", err)
	}
	if srv.sent.Load() != 1 || !g.Down() {
		t.Fatalf("%d sent, down %v", srv.sent.Load(), g.Down())
	}
}
