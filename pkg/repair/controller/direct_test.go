package controller_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// The tests of this file call Reconcile themselves, one node at a time, on
// a manager whose controller never runs (managerSpec.direct): what they
// check is what one reconcile decides and returns.

// conflicting answers every PATCH of the node called name with 409
// Conflict, as the API server answers a write based on a stale copy.
func conflicting(name string) *rest.Config {
	cfg := rest.CopyConfig(restCfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPatch || req.URL.Path != "/api/v1/nodes/"+name {
				return rt.RoundTrip(req)
			}
			body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Conflict","code":409,`+
				`"message":"Operation cannot be fulfilled on nodes %q: the object has been modified","details":{"name":%q,"kind":"nodes"}}`, name, name)
			return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{"Content-Type": []string{"application/json"}},
				Body: io.NopCloser(bytes.NewBufferString(body)), Request: req}, nil
		})
	}
	return cfg
}

// A write that conflicts is Reconcile's error: controller-runtime retries
// the node through the controller's rate limiter (controller.RetryInitial
// doubling to controller.RetryMax per node, internal/backoff.PerItem),
// never in a hot loop and without a backoff of the controller's own.
func TestAConflictingWriteIsRetriedThroughTheRateLimiter(t *testing.T) {
	h := newHarness(t)
	m := h.manager(managerSpec{cfg: conflicting("cf-0"), log: testr.New(t), direct: true})
	h.stop = m.stop
	h.node("cf-0")
	h.fault("cf-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	res, err := h.tryReconcile(m, "cf-0")
	if !apierrors.IsConflict(err) {
		t.Fatalf("reconcile with a conflicting write: %v, %+v; want the conflict as the error", err, res)
	}
	if !res.IsZero() {
		t.Errorf("result %+v beside the error: controller-runtime ignores it", res)
	}
}

// The decision over time, one reconcile at a time on the fake clock, and
// what each asks of the queue: a fault is recorded and its node asks to be
// reconciled when its toleration ends; a reconcile before then (an event)
// asks for what is left; a healthy node asks for nothing; at the end the
// repair starts (its drain queued at once, not after a delay); a drain a
// PodDisruptionBudget holds asks for its next pass, and for its deadline
// when that comes first.
func TestEachReconcileAsksForItsNextTime(t *testing.T) {
	h := newHarness(t)
	m := h.manager(managerSpec{cfg: restCfg, log: testr.New(t), direct: true})
	h.stop = m.stop
	for _, n := range []string{"rq-1", "rq-2", "rq-3", "rq-4", "rq-5"} {
		h.node(n)
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, h.ns, "db", "rq-1", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")))
	must[*policyv1PDB](t)(repairtest.PDB(h.ctx, k8s, h.ns, "db", "db", 1, 0))
	since := h.t0.Add(-10 * time.Minute)
	h.fault("rq-1", "KernelReady", "False", "KernelDeadlock", since)

	requeue := func(node string, want time.Duration) {
		t.Helper()
		if res := h.reconcileNow(m, node); res.RequeueAfter != want {
			t.Fatalf("%s at %s: %+v, want RequeueAfter %s", node, h.clock.Since(h.t0), res, want)
		}
	}
	requeue("rq-1", 20*time.Minute)
	if h.since("rq-1") == "" {
		t.Fatal("rq-1's fault not recorded")
	}
	h.advance(15 * time.Minute)
	requeue("rq-1", 5*time.Minute)
	requeue("rq-2", 0)
	h.advanceTo(since.Add(30 * time.Minute))
	requeue("rq-1", 0)
	if h.phase("rq-1") != string(record.PhaseDraining) || !h.tainted("rq-1") {
		t.Fatalf("rq-1 at its toleration's end: phase %q", h.phase("rq-1"))
	}
	started := h.clock.Now()
	requeue("rq-1", 10*time.Second) // the PDB holds the pod: the next pass
	h.advanceTo(started.Add(10*time.Minute - 4*time.Second))
	requeue("rq-1", 4*time.Second) // the deadline comes before the next pass
}
