package controller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// Crash safety. Two replicas run with leader election, as in production.
// Whenever the leader records any workflow step on the API, it "crashes"
// right after that write (seen at its transport, steps_test.go: none of its
// later requests reaches the API server, the manager stops without a
// goodbye); the standby takes over and a fresh standby starts. Every step of every repair is followed by such a crash.
// Karpenter and Cluster API are simulated by a loop that removes a node once
// its NodeClaim or Machine is deleted.
//
// Every API request of the controllers goes through an audit RoundTripper.
// In the end: each unhealthy node was tainted once, handed over once, its
// backend object deleted once, each pod evicted at most once, and no request
// changed any other node, pod, NodeClaim or Machine.
func TestCrashAfterEveryStep(t *testing.T) {
	// One reconcile at a time, so that a crash never cuts another
	// reconcile's write short (whose outcome the audit could not judge).
	h := newHarness(t, withLadder, func(o *controller.Options) { o.MaxConcurrentReconciles = 1 })
	ctx := h.ctx
	ns := "crash"
	if err := repairtest.Namespace(ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}

	// Four groups of five nodes (Karpenter, Cluster API, plain with action
	// Replace, plain with the default ladder), one unhealthy node in each:
	// 1 of 5 is within the gate (the plain nodes share the cluster group:
	// 2 of 10).
	must[*unstructured.Unstructured](t)(repairtest.NodePool(ctx, k8s, "cnp"))
	must[*unstructured.Unstructured](t)(repairtest.MachineDeployment(ctx, k8s, ns, "cmd"))
	var all []string
	for i := range 5 {
		k := fmt.Sprintf("ck-%d", i)
		nc := must[*unstructured.Unstructured](t)(repairtest.NodeClaim(ctx, k8s, k, "cnp", true))
		h.node(k, repairtest.InNodePool("cnp", nc))
		c := fmt.Sprintf("cc-%d", i)
		must[*unstructured.Unstructured](t)(repairtest.Machine(ctx, k8s, ns, c, "cmd-x", "cmd"))
		h.node(c, repairtest.OfMachine(ns, c, "cmd-x"))
		p := fmt.Sprintf("cp-%d", i)
		h.node(p)
		rp := fmt.Sprintf("cr-%d", i)
		h.node(rp, repairtest.Labels("repair", "replace"))
		all = append(all, k, c, p, rp)
	}
	h.policy("replace", v1alpha1.NodeRepairPolicySpec{Action: v1alpha1.ActionReplace,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"repair": "replace"}}})
	sick := map[string]string{ // node → its backend object's path
		"ck-0": "/apis/karpenter.sh/v1/nodeclaims/ck-0",
		"cc-0": "/apis/cluster.x-k8s.io/v1beta2/namespaces/crash/machines/cc-0",
		"cr-0": "/api/v1/nodes/cr-0",
	}
	// cp-0 takes the default ladder of a node no engine owns: Reboot,
	// verified by its boot ID (simulateAgents plays its agent and kubelet).
	const rebooted = "cp-0"
	// Pods everywhere; on the sick nodes, one that a PDB protects (evicted
	// only after a few passes) and two free ones.
	for _, n := range all {
		must[*corev1.Pod](t)(repairtest.Pod(ctx, k8s, ns, n+"-web", n, repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	}
	withLadder := map[string]bool{rebooted: true}
	for n := range sick {
		withLadder[n] = true
	}
	for n := range withLadder {
		must[*corev1.Pod](t)(repairtest.Pod(ctx, k8s, ns, n+"-api", n, repairtest.OwnedBy("apps/v1", "ReplicaSet", "api")))
		must[*corev1.Pod](t)(repairtest.Pod(ctx, k8s, ns, n+"-db", n, repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db-"+n)))
		// The budget opens a little later (on the fake clock's schedule
		// below), so that the drain takes several passes.
		must[*policyv1PDB](t)(repairtest.PDB(ctx, k8s, ns, "db-"+n, "db-"+n, 1, 0))
	}

	// Faults that expire 20 seconds (fake) after the start.
	for n := range withLadder {
		h.fault(n, "KernelReady", "False", "KernelDeadlock", h.t0.Add(-30*time.Minute+20*time.Second))
	}

	aud := &audit{}
	var replicas atomic.Int32

	var crashes atomic.Int32
	var stepsSeen sync.Map // "node/step" → count
	newReplica := func() *replica {
		rep := &replica{id: int(replicas.Add(1))}
		cfg := rest.CopyConfig(restCfg)
		// A crashed process sends nothing more: its requests stop at the
		// transport. (A Go HTTP/2 client still sends a request whose context
		// has ended, so the cancelled context alone would not model death.)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return afterSteps(aud.wrap(rep.id, rt), &rep.crashed, func(node string, s step) {
				v, _ := stepsSeen.LoadOrStore(node+"/"+string(s), new(atomic.Int32))
				v.(*atomic.Int32).Add(1)
				aud.note(rep.id, "step "+node+" "+string(s))
				if rep.crashed.Swap(true) {
					return
				}
				crashes.Add(1)
				// The process dies now, its write done and answered:
				// its context ends, and no later request of it reaches
				// the API server. (Its lease is released.)
				rep.r.cancel()
			})
		}
		rep.r = h.manager(managerSpec{cfg: cfg, log: logr.Discard(), leaderElection: true})
		return rep
	}
	leader, standby := newReplica(), newReplica()
	defer func() { leader.r.stop(); standby.r.stop() }()

	engineCtx, stopEngines := context.WithCancel(ctx)
	defer stopEngines()
	go simulateEngines(engineCtx, ns)
	go simulateAgents(engineCtx)

	// Drive the fake clock: 10 seconds per tick. The PDBs open after 2
	// minutes (fake), well before the 10-minute drain deadline.
	opened, returned := false, false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done := true
		for n := range sick {
			if !h.gone(n) {
				done = false
			}
		}
		// Back in service, its rung's record kept for the rung's window:
		// seen once is enough, as the fake clock runs on past the window
		// while the other repairs finish.
		if n := h.get(rebooted); n != nil && h.state(n).Ladder != nil && h.untouched(rebooted) {
			returned = true
		}
		if !returned {
			done = false
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			for n := range sick {
				t.Logf("%s: phase %q", n, h.phase(n))
			}
			if n := h.get(rebooted); n != nil {
				t.Logf("%s: record %s, taints %v", rebooted, n.Annotations[record.StateAnnotation], n.Spec.Taints)
			}
			t.Fatalf("repairs did not complete after %d crashes", crashes.Load())
		}
		if leader.crashed.Load() {
			<-leader.r.done
			leader, standby = standby, newReplica()
		}
		if !opened && h.clock.Since(h.t0) >= 2*time.Minute {
			for n := range withLadder {
				pdb := &policyv1PDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-" + n}}
				if err := repairtest.SetPDBStatus(ctx, k8s, pdb, 1, 1); err != nil {
					t.Fatal(err)
				}
			}
			opened = true
		}
		h.advance(10 * time.Second)
		time.Sleep(30 * time.Millisecond)
	}

	// Let the last reconcile finish (its hook may still be running).
	leader.r.stop()
	standby.r.stop()

	// Every step of every repair was followed by a crash.
	for n := range sick {
		for _, s := range []step{stepUnhealthyRecorded, stepTainted, stepEvicted, stepHandedOver, stepTargetDeleted} {
			if _, ok := stepsSeen.Load(n + "/" + string(s)); !ok {
				t.Errorf("no crash after %s of %s", s, n)
			}
		}
	}
	for _, s := range []step{stepUnhealthyRecorded, stepTainted, stepEvicted, stepRungDecided, stepOrdered, stepRebootVerified, stepReturned} {
		if _, ok := stepsSeen.Load(rebooted + "/" + string(s)); !ok {
			t.Errorf("no crash after %s of %s", s, rebooted)
		}
	}
	t.Logf("%d crashes, %d API requests", crashes.Load(), aud.len())
	defer func() {
		if t.Failed() {
			aud.dump(t, "/nodes/c")
		}
	}()

	// Exactly once: one taint, one hand-over, one deletion of the backend
	// object per repaired node.
	for n, target := range sick {
		if got := aud.count("PATCH", "/api/v1/nodes/"+n, recordPhase(record.PhaseDraining)); got != 1 {
			t.Errorf("%s tainted %d times", n, got)
		}
		if got := aud.count("PATCH", "/api/v1/nodes/"+n, recordPhase(record.PhaseTerminating)); got != 1 {
			t.Errorf("%s handed over %d times", n, got)
		}
		if got := aud.count("DELETE", target, ""); got != 1 {
			t.Errorf("%s: its backend object deleted %d times", n, got)
		}
		for _, p := range []string{n + "-web", n + "-api", n + "-db"} {
			evict, del := "/api/v1/namespaces/crash/pods/"+p+"/eviction", "/api/v1/namespaces/crash/pods/"+p
			if got := aud.count("POST", evict, "") + aud.count("DELETE", del, ""); got != 1 {
				t.Errorf("pod %s asked to leave %d times", p, got)
			}
		}
	}
	// The reboot: tainted once, one rung decided, one order, returned to
	// service once, never deleted.
	orders := "/apis/nodemend.dev/v1alpha1/noderemediations"
	for what, got := range map[string]int{
		"tainted": aud.count("PATCH", "/api/v1/nodes/"+rebooted, recordPhase(record.PhaseDraining)),
		// The record is written whole: the verification's write is in
		// phase Remediating too.
		"ordered (rung)":      aud.count("PATCH", "/api/v1/nodes/"+rebooted, recordPhase(record.PhaseRemediating)) - aud.count("PATCH", "/api/v1/nodes/"+rebooted, `verified`),
		"ordered (order)":     aud.count("POST", orders, `"nodeName":"`+rebooted+`"`),
		"verified":            aud.count("PATCH", "/api/v1/nodes/"+rebooted, `verified`),
		"returned to service": aud.count("PATCH", "/api/v1/nodes/"+rebooted, `{\"version\":1,\"ladder\":{`),
	} {
		if got != 1 {
			t.Errorf("%s %s %d times", rebooted, what, got)
		}
	}
	if got := aud.count("DELETE", "/api/v1/nodes/"+rebooted, ""); got != 0 {
		t.Errorf("%s deleted %d times", rebooted, got)
	}
	for _, p := range []string{rebooted + "-web", rebooted + "-api", rebooted + "-db"} {
		evict, del := "/api/v1/namespaces/crash/pods/"+p+"/eviction", "/api/v1/namespaces/crash/pods/"+p
		if got := aud.count("POST", evict, "") + aud.count("DELETE", del, ""); got != 1 {
			t.Errorf("pod %s asked to leave %d times", p, got)
		}
	}
	// No other node touched.
	for _, m := range aud.mutations() {
		for _, n := range all {
			if withLadder[n] {
				continue
			}
			if strings.Contains(m, "/nodes/"+n+" ") || strings.Contains(m, "/pods/"+n+"-") ||
				strings.HasSuffix(m, "/nodeclaims/"+n) || strings.HasSuffix(m, "/machines/"+n) {
				t.Errorf("healthy %s touched: %s", n, m)
			}
		}
	}
	for _, n := range all {
		if withLadder[n] {
			continue
		}
		if !h.untouched(n) || h.since(n) != "" {
			t.Errorf("healthy %s carries repair state", n)
		}
	}
}

var errCrashed = errors.New("crashed (test)")

type replica struct {
	id      int
	r       *running
	crashed atomic.Bool
}

// simulateEngines plays Karpenter and Cluster API finishing a deletion: a
// NodeClaim being deleted loses its node and then its finalizer; a Machine
// that is gone takes its node with it.
func simulateEngines(ctx context.Context, ns string) {
	for ctx.Err() == nil {
		ncs := &unstructured.UnstructuredList{}
		ncs.SetAPIVersion("karpenter.sh/v1")
		ncs.SetKind("NodeClaimList")
		if err := k8s.List(ctx, ncs); err == nil {
			for i := range ncs.Items {
				nc := &ncs.Items[i]
				if nc.GetDeletionTimestamp() == nil {
					continue
				}
				_ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nc.GetName()}})
				nc.SetFinalizers(nil)
				_ = k8s.Update(ctx, nc)
			}
		}
		nodes := &corev1.NodeList{}
		if err := k8s.List(ctx, nodes); err == nil {
			for _, n := range nodes.Items {
				m := n.Annotations["cluster.x-k8s.io/machine"]
				if m == "" {
					continue
				}
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("cluster.x-k8s.io/v1beta2")
				u.SetKind("Machine")
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: m}, u); apierrors.IsNotFound(err) {
					_ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}})
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// simulateAgents plays the agents and kubelets of nodes ordered to reboot:
// the agent accepts a new order and its host reboots (the kubelet reports a
// new boot ID); once the controller has seen the new boot, the agent of that
// boot drops the earlier boot's log fault.
func simulateAgents(ctx context.Context) {
	for ctx.Err() == nil {
		list := &v1alpha1.NodeRemediationList{}
		if err := k8s.List(ctx, list); err == nil {
			for i := range list.Items {
				o := &list.Items[i]
				if o.Status.Phase != "" {
					continue
				}
				o.Status.Phase, o.Status.BootID = v1alpha1.RemediationAccepted, o.Spec.BootID
				if k8s.Status().Update(ctx, o) == nil {
					_ = repairtest.Reboot(ctx, k8s, o.Spec.NodeName, "boot-2-"+o.Spec.NodeName)
				}
			}
		}
		nodes := &corev1.NodeList{}
		if err := k8s.List(ctx, nodes); err == nil {
			for i := range nodes.Items {
				n := &nodes.Items[i]
				if st, err := record.Read(n); err == nil && st.Rung != nil && !st.Rung.Verified.IsZero() {
					_ = repairtest.SetCondition(ctx, k8s, n.Name, repairtest.Condition("KernelReady", corev1.ConditionTrue, "KernelIsReady", time.Now()))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// audit records the controllers' API requests.
type audit struct {
	mu      sync.Mutex
	entries []auditEntry
}

type auditEntry struct {
	replica            int
	at                 time.Time
	method, path, body string
	code               int
	err                error
}

func (a *audit) note(replica int, what string) {
	a.mu.Lock()
	a.entries = append(a.entries, auditEntry{replica: replica, at: time.Now(), method: "NOTE", path: what})
	a.mu.Unlock()
}

func (a *audit) wrap(replica int, rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil && req.Method != http.MethodGet {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := rt.RoundTrip(req)
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		a.mu.Lock()
		a.entries = append(a.entries, auditEntry{replica: replica, at: time.Now(), method: req.Method, path: req.URL.Path, body: string(body), code: code, err: err})
		a.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (a *audit) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

// count counts successful requests with method and path whose body
// contains substr.
// recordPhase is how a Node patch that writes a record in phase p says it
// (the record is a JSON string inside the patch).
func recordPhase(p record.Phase) string { return `\"phase\":\"` + string(p) + `\"` }

func (a *audit) count(method, path, substr string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.entries {
		if e.method == method && e.path == path && e.code >= 200 && e.code < 300 && strings.Contains(e.body, substr) {
			n++
		}
	}
	return n
}

func (a *audit) dump(t *testing.T, substr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.entries {
		if strings.Contains(e.path, substr) || e.method == "NOTE" || strings.Contains(e.path, "leases") {
			t.Logf("%s r%d %s %s → %d %v %.150s", e.at.Format("15:04:05.000"), e.replica, e.method, e.path, e.code, e.err, e.body)
		}
	}
}

var leaseOrEvent = regexp.MustCompile(`/(leases|events)(/|$)`)

// mutations lists "METHOD path " of every write other than events and the
// leader election Lease.
func (a *audit) mutations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, e := range a.entries {
		if e.method == http.MethodGet || leaseOrEvent.MatchString(e.path) {
			continue
		}
		out = append(out, e.method+" "+e.path+" ")
	}
	return out
}
