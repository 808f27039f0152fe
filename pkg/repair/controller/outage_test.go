package controller_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/apigate"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// resourceKind names a request ("METHOD /path?query", as testenv.Outage
// records it) by its resource, subresource, verb and whether it watches.
func resourceKind(req string) string {
	method, target, _ := strings.Cut(req, " ")
	path, query, _ := strings.Cut(target, "?")
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return method + " " + path
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) == 0 {
		return method + " discovery"
	}
	kind := seg[0]
	if len(seg) >= 3 {
		kind += "/" + seg[2]
	}
	if strings.Contains(query, "watch=true") {
		return kind + " watch"
	}
	if len(seg) == 1 && method == "GET" {
		return kind + " list"
	}
	return kind + " " + method
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// TestControllerRequestsBackOffThroughAnOutage runs the repair controller's
// manager (its cache's lists and watches, its client's node patches, its
// events, the drain's clientset) against the real API server behind a
// proxy that goes down for a minute, refusing connections or closing them
// after the request. Its gate runs on a fake clock, walked over the minute
// in 50 ms steps. In the minute the controller sends at most what the gate
// lets out — the requests in flight when the server went, then one probe
// per delay — at most 30, and the proxy accepts no more connections than
// requests. When the server is back, a fault that appeared during the
// outage is recorded on its node.
func TestControllerRequestsBackOffThroughAnOutage(t *testing.T) {
	for _, mode := range []testenv.OutageMode{testenv.Refuse, testenv.CloseAfterRequest} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t)
			outage, err := testenv.NewOutage(restCfg)
			if err != nil {
				t.Fatal(err)
			}
			defer outage.Close()
			gclk := clocktesting.NewFakeClock(time.Now())
			gate := apigate.New(apigate.Options{Clock: gclk})
			h.node("out-1")
			h.node("out-2")
			h.fault("out-1", "KernelReady", "False", "KernelDeadlock", h.t0)
			m := h.manager(managerSpec{cfg: outage.Config(restCfg), log: testr.NewWithOptions(t, testr.Options{Verbosity: 0}), gate: gate})
			h.stop = m.stop
			h.eventually("out-1 recorded unhealthy", func() bool { return h.since("out-1") != "" })

			step := func(d time.Duration) {
				t.Helper()
				gclk.Step(d)
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Microsecond) {
					if _, settled := gate.Settled(); settled {
						time.Sleep(time.Millisecond)
						if _, settled := gate.Settled(); settled {
							return
						}
					}
					if time.Now().After(deadline) {
						t.Fatal("requests still out 20 s after a step")
					}
				}
			}
			before, acceptedBefore := len(outage.Requests()), outage.Accepted()
			outage.DownAs(mode)
			// A fault the controller cannot see until the server is back,
			// and out-1's toleration ends: the controller wants to taint it.
			h.fault("out-2", "KernelReady", "False", "KernelDeadlock", h.t0)
			h.advance(31 * time.Minute)
			for start := gclk.Now(); gclk.Since(start) < time.Minute; {
				step(50 * time.Millisecond)
			}
			during := outage.Requests()[before:]
			accepted := outage.Accepted() - acceptedBefore
			kinds := map[string]int{}
			for _, r := range during {
				kinds[resourceKind(r)]++
			}
			probes := backoff.MaxAttempts(apigate.DefaultInitial, apigate.DefaultMax, time.Minute)
			t.Logf("%s: %d requests in a minute of outage (%s); %d connections accepted by the proxy", mode, len(during), formatCounts(kinds), accepted)
			if len(during) > 30 {
				t.Errorf("%d requests in a minute of outage: more than the goal of 30", len(during))
			}
			for k, n := range kinds {
				if n > probes {
					t.Errorf("%s: %d requests in the minute, more than the gate's %d probes", k, n, probes)
				}
			}
			if kinds["nodes PATCH"] == 0 {
				t.Errorf("no node patch tried in the outage: the test did not make the controller write")
			}
			if accepted > len(during)+2 {
				t.Errorf("%d connections accepted for %d requests: connections nobody counted", accepted, len(during))
			}

			outage.Up()
			back, realBack := gclk.Now(), time.Now()
			// Recorded, or already repaired: once out-1's repair ends,
			// out-2 is the breaker's backlog head and starts at once.
			for h.since("out-2") == "" && !h.gone("out-2") {
				if time.Since(realBack) > 30*time.Second {
					t.Fatalf("%s: the fault made during the outage is not recorded 30 s after the return", mode)
				}
				step(50 * time.Millisecond)
			}
			t.Logf("%s: the fault made during the outage recorded %v after the return (%v of the gate's fake time; the cache's watches resume on client-go's real-time backoff)",
				mode, time.Since(realBack).Round(time.Millisecond), gclk.Since(back))
			if !h.untouched("out-1") {
				t.Logf("%s: out-1 tainted after the return", mode)
			}
		})
	}
}
