package controller_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// decidedThenGone runs a controller until it has recorded node's reboot
// attempt and stops it there, before the order is created (a crash, a lost
// lease). It returns the attempt.
func decidedThenGone(t *testing.T, h *harness, node string) ladder.Attempt {
	t.Helper()
	var gone atomic.Bool
	var m *running
	cfg := rest.CopyConfig(restCfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return afterSteps(rt, &gone, func(n string, s step) {
			if n == node && s == stepRungDecided && !gone.Swap(true) {
				m.cancel()
			}
		})
	}
	m = h.manager(managerSpec{cfg: cfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.advanceTo(h.expire(node))
	h.eventually(node+" decided", func() bool { return gone.Load() })
	m.stop()
	a := h.attempt(node)
	if a == nil || a.Order == "" || h.phase(node) != string(record.PhaseRemediating) {
		t.Fatalf("%s: attempt %+v, phase %q", node, a, h.phase(node))
	}
	if n := len(h.orders(node)); n != 0 {
		t.Fatalf("%s: %d orders before the restart", node, n)
	}
	return *a
}

// restart runs a fresh controller, as a new leader would.
func (h *harness) restart(t *testing.T) {
	m := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.reg, h.stop = m.reg, m.stop
}

// A controller that comes back while the order's life (a third of the
// attempt's timeout) lasts creates the order with what is left of that
// life: it dies when one created on time would have.
func TestAnOrderCreatedLateGetsWhatIsLeftOfItsLife(t *testing.T) {
	h := newHarness(t, withLadder)
	for _, n := range []string{"lo-0", "lo-1", "lo-2", "lo-3", "lo-4"} {
		h.node(n)
	}
	a := decidedThenGone(t, h, "lo-0")
	h.advanceTo(a.Started.Add(2 * time.Minute))
	h.restart(t)
	o := h.waitOrder("lo-0", v1alpha1.HostReboot)
	if o.Spec.ActiveDeadlineSeconds != 180 {
		t.Errorf("an order created 2m into a 5m life: activeDeadlineSeconds %d, want 180", o.Spec.ActiveDeadlineSeconds)
	}
}

// "By the time the ladder moves on, the previous order is dead": an order
// found missing after its life — or after its attempt's timeout, when the
// ladder escalates at once — is never created with a fresh deadline; the
// attempt fails and the next rung starts with no order alive.
func TestAnOrderFoundMissingLateIsNotCreated(t *testing.T) {
	for _, c := range []struct {
		name string
		away time.Duration
		node string
	}{
		{"after its life", 6 * time.Minute, "lm-0"},
		{"after the attempt's timeout", 20 * time.Minute, "lt-0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, withLadder)
			// Orders outlive their nodes here (no garbage collector):
			// each case has nodes of its own.
			for i := range 5 {
				h.node(c.node[:3] + strconv.Itoa(i))
			}
			a := decidedThenGone(t, h, c.node)
			h.advanceTo(a.Started.Add(c.away))
			h.restart(t)
			if c.away < a.Timeout.Duration {
				h.consistently("no order created", func() bool { return len(h.orders(c.node)) == 0 })
				h.advanceTo(a.Deadline())
			}
			h.eventually(c.node+" quarantined", func() bool { return h.phase(c.node) == string(record.PhaseQuarantined) })
			h.waitEvent(c.node, "NodeRemediationFailed", "order not picked up by the agent")
			if n := len(h.orders(c.node)); n != 0 {
				t.Errorf("%d orders created, want none", n)
			}
		})
	}
}
