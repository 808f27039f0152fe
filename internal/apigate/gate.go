// Package apigate holds a process's requests to the Kubernetes API server
// while the server is unreachable, so that an outage costs the server one
// request at a time from each process, however many kinds of request the
// process makes.
//
// Every client of the process (typed, REST, informers' lists and watches,
// leader election, event sinks) sends through one Gate, installed on the
// REST config they are built from (Config). While requests succeed the
// gate only watches. The first request that finds no server (a refused or
// reset connection, a connection closed before an answer, a timeout, a
// gateway's 502, 503 or 504) closes it: from then on one request at a
// time is let through as a probe, after a delay that grows exponentially
// with jitter to a ceiling (internal/backoff), and every other request
// waits for the probe's answer. The first answer from the server opens the
// gate and sends everything that waited at once, so the latest state
// reaches the server within one ceiling of its return.
//
// Why one gate and not a backoff per request kind: each kind backing off on
// its own to a ceiling short enough to resume promptly (seconds) still adds
// up to many requests a minute per process (an agent has seven kinds), and
// client-go retries a failed GET ten times a second apart below any caller's
// backoff. Held at the transport, every kind backs off together, client-go's
// own retries included.
package apigate

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/backoff"
)

// Defaults of Options.
const (
	// DefaultInitial is the first probe's delay after a failure: short, so
	// that a single dropped connection costs the others little.
	DefaultInitial = 500 * time.Millisecond
	// DefaultMax is the ceiling of the probes' delays: with the jitter
	// (backoff.Jitter, +20%) a probe every 4–4.8 s, 12.5 to 15 requests a
	// minute per process through an outage, and the latest state written
	// within 5 s of the server's return.
	DefaultMax = 4 * time.Second
)

// Options configure a Gate.
type Options struct {
	// Clock paces the probes; nil is the real clock.
	Clock clock.Clock
	// Initial and Max bound the delays between probes (DefaultInitial,
	// DefaultMax when zero).
	Initial, Max time.Duration
	// OnChange hears when the gate closes (down, with the failure) and
	// opens again. Called without the gate's lock; nil discards.
	OnChange func(down bool, err error)
}

// Gate is the shared state of one process's requests to one API server.
// The zero value is not usable; build it with New.
type Gate struct {
	clk      clock.Clock
	onChange func(bool, error)

	mu    sync.Mutex
	retry *backoff.Retry
	down  bool
	// epoch counts the gate's changes: a failure of a request admitted
	// before the last change is already accounted for (several requests
	// in flight fail together when the server goes).
	epoch uint64
	// next is when the next probe may go, while down.
	next    time.Time
	probing bool
	// changed is closed and replaced on every change, waking the waiters.
	changed chan struct{}
	// inFlight and waiting count the requests let through and not yet
	// returned, and those held (tests step a fake clock when all are
	// settled).
	inFlight, waiting int
}

// New builds a gate.
func New(o Options) *Gate {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Initial <= 0 {
		o.Initial = DefaultInitial
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	return &Gate{clk: o.Clock, onChange: o.OnChange, retry: backoff.New(o.Initial, o.Max), changed: make(chan struct{})}
}

// Config returns a copy of cfg whose requests go through the gate. Build
// every client of the process from configs the same gate returned.
func (g *Gate) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(g.Wrap)
	return c
}

// Wrap returns rt behind the gate.
func (g *Gate) Wrap(rt http.RoundTripper) http.RoundTripper { return &tripper{g: g, rt: rt} }

// Down reports whether the gate holds requests (the server was not
// reached by the last probe).
func (g *Gate) Down() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// Settled reports how many requests are held, and whether none let
// through is still out and no probe is due: tests move a fake clock once
// every caller is held or done.
func (g *Gate) Settled() (held int, settled bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	due := g.down && !g.probing && g.waiting > 0 && !g.clk.Now().Before(g.next)
	return g.waiting, g.inFlight == 0 && !due
}

type tripper struct {
	g  *Gate
	rt http.RoundTripper
}

func (t *tripper) RoundTrip(req *http.Request) (*http.Response, error) {
	epoch, probe, err := t.g.admit(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := t.rt.RoundTrip(req)
	t.g.settle(epoch, probe, outage(req, resp, err), err)
	return resp, err
}

// admit waits until the request may go: at once while the gate is open;
// while it is down, as the probe once the delay has passed and no other
// probe is out, or when a probe's answer opens the gate.
func (g *Gate) admit(ctx context.Context) (epoch uint64, probe bool, err error) {
	for {
		g.mu.Lock()
		if !g.down {
			g.inFlight++
			epoch := g.epoch
			g.mu.Unlock()
			return epoch, false, nil
		}
		now := g.clk.Now()
		if !g.probing && !now.Before(g.next) {
			g.probing = true
			g.inFlight++
			epoch := g.epoch
			g.mu.Unlock()
			return epoch, true, nil
		}
		changed := g.changed
		var timer clock.Timer
		var due <-chan time.Time
		if !g.probing {
			timer = g.clk.NewTimer(g.next.Sub(now))
			due = timer.C()
		}
		g.waiting++
		g.mu.Unlock()
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-changed:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		if err != nil {
			return 0, false, err
		}
	}
}

// settle records a request's outcome.
func (g *Gate) settle(epoch uint64, probe, failed bool, cause error) {
	g.mu.Lock()
	g.inFlight--
	if probe {
		g.probing = false
	}
	var notify func()
	switch {
	case !failed && g.down && probe:
		// The server answered the probe: everything goes again.
		g.down = false
		g.retry.Reset()
		g.epoch++
		notify = func() { g.onChange(false, nil) }
	case failed && epoch == g.epoch:
		if !g.down {
			g.down = true
			g.retry.Reset()
			notify = func() { g.onChange(true, cause) }
		}
		g.epoch++
		g.next = g.clk.Now().Add(g.retry.Next())
	}
	// Waiters look again: the gate changed, or the probe slot is free.
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	if notify != nil && g.onChange != nil {
		notify()
	}
}

// outage reports whether a request's outcome says the server was not
// reached: a transport error (refused, reset or closed connection, a
// handshake or response timeout) other than the caller giving up, or a
// gateway's 502, 503 or 504 (a load balancer without live servers). Any
// other answer, errors included, came from the server.
func outage(req *http.Request, resp *http.Response, err error) bool {
	if err != nil {
		return req.Context().Err() == nil && !errors.Is(err, context.Canceled)
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
