package controller_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// The drain honours a PodDisruptionBudget that allows no disruption until the
// policy's deadline, then deletes the pod; DaemonSet and mirror pods stay;
// then the node goes to its backend. PDB status is written by the test:
// there is no kube-controller-manager here, and the Eviction API of the real
// API server enforces whatever status the PDB has.
func TestDrainPDBBlocksUntilTheDeadlineThenForces(t *testing.T) {
	h := start(t)
	ns := "drain"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		h.node(fmt.Sprintf("dr-%d", i))
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "guarded", "dr-0", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")))
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "web", "dr-0", repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "static", "dr-0", repairtest.Mirror()))
	if _, err := repairtest.DaemonSet(h.ctx, k8s, ns, "agent"); err != nil {
		t.Fatal(err)
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "agent-dr-0", "dr-0", repairtest.OwnedBy("apps/v1", "DaemonSet", "agent")))
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "other-node", "dr-1", repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	must[*policyv1PDB](t)(repairtest.PDB(h.ctx, k8s, ns, "db", "db", 1, 0))

	started := h.expire("dr-0")
	h.advanceTo(started)
	h.eventually("web evicted", func() bool { return h.podTerminating(ns, "web") })
	h.waitEvent("dr-0", "NodeDrainBlocked", "Cannot evict pod as it would violate the pod's disruption budget")
	if !h.tainted("dr-0") || h.phase("dr-0") != string(record.PhaseDraining) {
		t.Fatal("dr-0 not tainted and draining")
	}

	// The drain polls every 10s; the PDB keeps refusing until the deadline
	// (10 minutes from the start of the repair).
	for h.clock.Now().Before(started.Add(10*time.Minute - 10*time.Second)) {
		h.advance(10 * time.Second)
	}
	h.advanceTo(started.Add(10*time.Minute - time.Second))
	h.consistently("guarded pod kept until the deadline", func() bool { return !h.podTerminating(ns, "guarded") })

	h.advanceTo(started.Add(10 * time.Minute))
	h.eventually("guarded pod deleted at the deadline", func() bool { return h.podTerminating(ns, "guarded") })
	h.waitEvent("dr-0", "NodeDrainDeadlineExceeded", "deleted 1 remaining pods")
	// The next pass finds only terminating pods, past the deadline.
	h.advance(10 * time.Second)
	h.eventually("node handed over and deleted", func() bool { return h.gone("dr-0") })
	for _, p := range []string{"static", "agent-dr-0", "other-node"} {
		if h.podTerminating(ns, p) {
			t.Errorf("pod %s was evicted", p)
		}
	}
}

// A node whose kubelet is not reporting (Ready Unknown) cannot confirm that
// its pods terminated: the drain does not wait for them.
func TestDrainDoesNotWaitForADeadKubelet(t *testing.T) {
	h := start(t)
	ns := "deadkubelet"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		h.node(fmt.Sprintf("dk-%d", i))
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "web", "dk-0", repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	h.fault("dk-0", "Ready", "Unknown", "NodeStatusUnknown", h.t0)
	h.waitRecorded("dk-0")
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.eventually("evicted", func() bool { return h.podTerminating(ns, "web") })
	// The next pass (10s later) sees only a terminating pod on a dead node.
	h.advance(10 * time.Second)
	h.eventually("replaced without waiting for the deadline", func() bool { return h.gone("dk-0") })
}

// Karpenter backend: the node's own NodeClaim is deleted, no other; the repair
// is done when Karpenter (here: the test) removes the node.
func TestKarpenterBackendDeletesTheNodeClaim(t *testing.T) {
	h := start(t)
	must[*unstructured.Unstructured](t)(repairtest.NodePool(h.ctx, k8s, "kb"))
	for i := range 5 {
		name := fmt.Sprintf("kb-%d", i)
		nc := must[*unstructured.Unstructured](t)(repairtest.NodeClaim(h.ctx, k8s, name, "kb", true))
		h.node(name, repairtest.InNodePool("kb", nc))
	}
	h.advanceTo(h.expire("kb-2"))
	h.eventually("NodeClaim kb-2 deleting", func() bool { return !h.exists("karpenter.sh/v1", "NodeClaim", "", "kb-2") })
	h.waitEvent("kb-2", "NodeRepairTargetDeleted", "deleted NodeClaim kb-2")
	for _, n := range []string{"kb-0", "kb-1", "kb-3", "kb-4"} {
		if !h.exists("karpenter.sh/v1", "NodeClaim", "", n) || !h.untouched(n) {
			t.Errorf("%s touched", n)
		}
	}
	if h.phase("kb-2") != string(record.PhaseTerminating) {
		t.Errorf("kb-2 phase %q", h.phase("kb-2"))
	}
	// Karpenter's termination controller removes the node.
	if err := k8s.Delete(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kb-2"}}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("kb-2", "NodeRepairSucceeded", "node gone")
	if v := sum(t, h, "nodemend_repairs_succeeded_total"); v != 1 {
		t.Errorf("succeeded = %v", v)
	}
}

// Cluster API backend: the node's Machine is deleted, no other.
func TestClusterAPIBackendDeletesTheMachine(t *testing.T) {
	h := start(t)
	ns := "capi-backend"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	must[*unstructured.Unstructured](t)(repairtest.MachineDeployment(h.ctx, k8s, ns, "md"))
	for i := range 5 {
		name := fmt.Sprintf("cb-%d", i)
		must[*unstructured.Unstructured](t)(repairtest.Machine(h.ctx, k8s, ns, name, "md-x", "md"))
		h.node(name, repairtest.OfMachine(ns, name, "md-x"))
	}
	h.advanceTo(h.expire("cb-4"))
	h.eventually("Machine cb-4 deleted", func() bool { return !h.exists("cluster.x-k8s.io/v1beta2", "Machine", ns, "cb-4") })
	h.waitEvent("cb-4", "NodeRepairTargetDeleted", "deleted Machine capi-backend/cb-4")
	for _, n := range []string{"cb-0", "cb-1", "cb-2", "cb-3"} {
		if !h.exists("cluster.x-k8s.io/v1beta2", "Machine", ns, n) || !h.untouched(n) {
			t.Errorf("%s touched", n)
		}
	}
	if !h.exists("cluster.x-k8s.io/v1beta2", "MachineDeployment", ns, "md") {
		t.Error("MachineDeployment deleted")
	}
}

// A node whose Machine is missing cannot be handed over: the repair is
// reported failed once, and the node stays tainted for a human.
func TestMissingBackendObjectFailsTheRepair(t *testing.T) {
	h := start(t)
	for i := range 5 {
		h.node(fmt.Sprintf("orph-%d", i))
	}
	h.annotate("orph-0", "cluster.x-k8s.io/machine", ptr("vanished"))
	h.annotate("orph-0", "cluster.x-k8s.io/cluster-namespace", ptr("default"))
	h.advanceTo(h.expire("orph-0"))
	h.waitEvent("orph-0", "NodeRepairFailed", "Machine default/vanished of node orph-0 does not exist")
	h.advance(5 * time.Minute)
	h.consistently("still there, tainted", func() bool { return h.tainted("orph-0") })
	if evs := h.events("orph-0", "NodeRepairFailed"); len(evs) != 1 {
		t.Errorf("%d NodeRepairFailed events", len(evs))
	}
	if v := sum(t, h, "nodemend_repairs_failed_total"); v != 1 {
		t.Errorf("failed = %v", v)
	}
}

// Node backend: the Node object itself is deleted.
func TestNodeBackendDeletesTheNode(t *testing.T) {
	h := start(t)
	for i := range 5 {
		h.node(fmt.Sprintf("nb-%d", i))
	}
	h.advanceTo(h.expire("nb-1"))
	h.eventually("nb-1 gone", func() bool { return h.gone("nb-1") })
	for _, n := range []string{"nb-0", "nb-2", "nb-3", "nb-4"} {
		if !h.untouched(n) {
			t.Errorf("%s touched", n)
		}
	}
}

// A reconcile queued by the hand-over's own write can read the node from a
// cache that has not seen its deletion yet: the controller that deleted it
// waits for it to go instead of reading it again (at 16 workers, most of a
// storm's nodes were read once more so). The test reconciles the node
// itself up to its deletion, then runs the termination step with the node
// as the hand-over wrote it, as such a reconcile would.
func TestDeletedNodeIsNotReadAgain(t *testing.T) {
	h := newHarness(t)
	var reads atomic.Int32
	var stale atomic.Pointer[corev1.Node]
	cfg := rest.CopyConfig(restCfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path != "/api/v1/nodes/dn-0" {
				return rt.RoundTrip(req)
			}
			if req.Method == http.MethodGet {
				reads.Add(1)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && req.Method == http.MethodPatch && resp.StatusCode == http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				resp.Body = io.NopCloser(bytes.NewReader(body))
				if n := writtenNode(body); n != nil && h.state(n).Phase == record.PhaseTerminating {
					stale.Store(n) // as a cache would hold it after the hand-over
				}
			}
			return resp, err
		})
	}
	m := h.manager(managerSpec{cfg: cfg, log: testr.New(t), direct: true})
	h.stop = m.stop
	h.node("dn-0")
	h.fault("dn-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.reconcileNow(m, "dn-0") // recorded
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.reconcileNow(m, "dn-0") // tainted
	h.reconcileNow(m, "dn-0") // drained, handed over, deleted
	if !h.gone("dn-0") {
		t.Fatalf("dn-0 not deleted; phase %q", h.phase("dn-0"))
	}
	n := stale.Load()
	if n == nil {
		t.Fatal("the hand-over's write was not seen")
	}
	before := reads.Load()
	if err := m.rec.TerminateStale(h.ctx, n); err != nil {
		t.Fatalf("terminate with the stale node: %v", err)
	}
	if got := reads.Load() - before; got != 0 {
		t.Errorf("the deleted node was read %d times by a reconcile with a stale copy, want 0", got)
	}
}

// writtenNode decodes the API server's answer to a node write (protobuf or
// JSON); nil if it is not a node.
func writtenNode(body []byte) *corev1.Node {
	obj, err := runtime.Decode(clientgoscheme.Codecs.UniversalDeserializer(), body)
	if err != nil {
		return nil
	}
	n, _ := obj.(*corev1.Node)
	return n
}

// A NodeRepairPolicy overrides the defaults for the nodes it selects: here a
// shorter toleration, a reason filter (a family: every NvidiaXID<N>Error),
// and action None for another pool.
func TestPolicyOverrides(t *testing.T) {
	h := start(t)
	h.policy("fast-gpu", v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/pool": "gpu"}},
		Rules: []v1alpha1.RepairRule{{ConditionType: "AcceleratedHardwareReady", Status: "False",
			Toleration: metav1.Duration{Duration: time.Minute}, Reasons: []string{"NvidiaXIDError"}}},
		MaxUnhealthy: ptr(intstr.FromString("50%")),
	})
	h.policy("watch-only", v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/pool": "db"}},
		Action:       v1alpha1.ActionNone,
	})
	for i := range 2 {
		h.node(fmt.Sprintf("pg-%d", i), repairtest.Labels("example.com/pool", "gpu"))
		h.node(fmt.Sprintf("pdb-%d", i), repairtest.Labels("example.com/pool", "db"))
	}
	for i := range 6 {
		h.node(fmt.Sprintf("po-%d", i))
	}
	h.fault("pg-0", "AcceleratedHardwareReady", "False", health.ReasonNvidiaXID79Error, h.t0)
	h.fault("pg-1", "AcceleratedHardwareReady", "False", health.ReasonNvidiaDoubleBitError, h.t0) // not in the family
	h.fault("pdb-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.waitRecorded("pg-0")
	h.waitRecorded("pdb-0")
	h.advanceTo(h.t0.Add(time.Minute))
	h.eventually("pg-0 repaired after 1 minute", func() bool { return h.gone("pg-0") })
	h.advanceTo(h.t0.Add(2 * time.Hour))
	h.consistently("pg-1 (other reason) and pdb-0 (action None) untouched", func() bool {
		return h.untouched("pg-1") && h.untouched("pdb-0")
	})
	if h.since("pg-1") != "" {
		t.Error("pg-1 recorded as unhealthy: its reason is not in the policy's rule")
	}
	// Counted all the same.
	if v := gauge(t, h, "nodemend_unhealthy_nodes", "pool", "cluster", "condition", "KernelReady"); v != 1 {
		t.Errorf("unhealthy gauge for pdb-0 = %v", v)
	}
}

// The metrics the issue lists are there after a repair.
func TestMetrics(t *testing.T) {
	h := start(t)
	for i := range 5 {
		h.node(fmt.Sprintf("met-%d", i), repairtest.Labels("karpenter.sh/nodepool", "m"))
	}
	h.fault("met-1", "StorageReady", "False", "DiskReadOnly", h.t0)
	h.waitRecorded("met-1")
	if v := gauge(t, h, "nodemend_unhealthy_nodes", "pool", "NodePool/m", "condition", "StorageReady"); v != 1 {
		t.Errorf("unhealthy gauge = %v", v)
	}
	h.fault("met-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.fault("met-2", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.waitRecorded("met-2")
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.eventually("blocked pool gauge", func() bool {
		return gauge(t, h, "nodemend_repair_blocked_pools", "pool", "NodePool/m", "gate", "Pool") == 1
	})
	h.recover("met-0", "KernelReady")
	h.recover("met-2", "KernelReady")
	h.advance(5 * time.Minute)
	// The NodePool label alone (no NodeClaim) makes it a Karpenter node; it
	// has no NodeClaim, so the hand-over fails: the failure metric.
	h.eventually("failure counted", func() bool { return sum(t, h, "nodemend_repairs_failed_total") == 1 })
	if v := sum(t, h, "nodemend_repairs_started_total"); v != 1 {
		t.Errorf("started = %v", v)
	}
	if gauge(t, h, "nodemend_repair_blocked_pools", "pool", "NodePool/m", "gate", "Pool") != 0 {
		t.Error("pool still reported blocked")
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
	}
	for _, name := range []string{"nodemend_repair_unhealthy_to_start_seconds", "nodemend_repair_drain_duration_seconds", "nodemend_repair_paused", "nodemend_repair_blocked_total"} {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

// sum adds a counter family up over its labels.
func sum(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func gauge(t *testing.T, h *harness, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// A policy the controller cannot use is reported on itself and ignored: its
// nodes keep the defaults.
func TestInvalidPolicyIsReportedAndIgnored(t *testing.T) {
	h := start(t)
	h.policy("broken", v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Sometimes"}}},
		Action:       v1alpha1.ActionNone,
	})
	for i := range 5 {
		h.node(fmt.Sprintf("inv-%d", i))
	}
	h.waitEvent("broken", "NodeRepairPolicyInvalid", "policy ignored")
	h.advanceTo(h.expire("inv-0"))
	h.eventually("repaired under the defaults", func() bool { return h.gone("inv-0") })
}
