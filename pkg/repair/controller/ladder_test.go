package controller_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// The ladder on nodes no engine owns (the default: [ResetAccelerator,]
// Reboot, Quarantine), with the node's agent and kubelet played by the test:
// the agent reports on its order, the kubelet writes the new boot ID.

// attempt is the node's recorded rung attempt.
func (h *harness) attempt(name string) *ladder.Attempt {
	n := h.get(name)
	if n == nil {
		return nil
	}
	return h.state(n).Rung
}

// waitOrder waits for the node's current attempt to have its order created,
// and returns the order.
func (h *harness) waitOrder(node string, action v1alpha1.HostAction) *v1alpha1.NodeRemediation {
	h.t.Helper()
	o := &v1alpha1.NodeRemediation{}
	h.eventually(node+" ordered "+string(action), func() bool {
		a := h.attempt(node)
		if a == nil || a.Order == "" {
			return false
		}
		return k8s.Get(h.ctx, client.ObjectKey{Name: a.Order}, o) == nil && o.Spec.Action == action
	})
	return o
}

// report writes the agent's status on an order.
func (h *harness) report(o *v1alpha1.NodeRemediation, phase v1alpha1.RemediationPhase, msg string) {
	h.t.Helper()
	cur := &v1alpha1.NodeRemediation{}
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: o.Name}, cur); err != nil {
		h.t.Fatal(err)
	}
	cur.Status.Phase, cur.Status.Message, cur.Status.BootID = phase, msg, cur.Spec.BootID
	if err := k8s.Status().Update(h.ctx, cur); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) orders(node string) []v1alpha1.NodeRemediation {
	h.t.Helper()
	list := &v1alpha1.NodeRemediationList{}
	if err := k8s.List(h.ctx, list); err != nil {
		h.t.Fatal(err)
	}
	var out []v1alpha1.NodeRemediation
	for _, o := range list.Items {
		if o.Spec.NodeName == node {
			out = append(out, o)
		}
	}
	return out
}

func (h *harness) rungs(action, result string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nodemend_repair_rungs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if have["action"] == action && have["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A faulted node no engine owns is drained, rebooted once, verified by its
// boot ID, and returned to service when healthy.
func TestRebootVerifiedByBootIDReturnsTheNodeToService(t *testing.T) {
	h := start(t, withLadder)
	for _, n := range []string{"rb-0", "rb-1", "rb-2", "rb-3", "rb-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("rb-0"))
	o := h.waitOrder("rb-0", v1alpha1.HostReboot)
	if o.Spec.NodeName != "rb-0" || o.Spec.BootID != "boot-1-rb-0" || o.Spec.Reason != "KernelReady=False/KernelDeadlock" ||
		o.Spec.ActiveDeadlineSeconds != 300 || len(o.OwnerReferences) != 1 || o.OwnerReferences[0].Kind != "Node" {
		t.Errorf("order %+v", o)
	}
	// The trigger, typed, as the repair record keeps it.
	if tr := o.Spec.Trigger; tr == nil || *tr != (v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"}) {
		t.Errorf("order's trigger %+v", tr)
	}
	if !h.tainted("rb-0") || h.phase("rb-0") != string(record.PhaseRemediating) {
		t.Fatalf("rb-0: tainted %v, phase %q", h.tainted("rb-0"), h.phase("rb-0"))
	}
	h.waitEvent("rb-0", "NodeRemediationOrdered", "ordered Reboot from the node's agent")

	// The agent accepts and reboots; the kubelet of the new boot reports it.
	h.report(o, v1alpha1.RemediationAccepted, "accepted on boot boot-1-rb-0")
	h.advance(time.Minute)
	if err := repairtest.Reboot(h.ctx, k8s, "rb-0", "boot-2-rb-0"); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("rb-0", "NodeRebootVerified", "boot boot-1-rb-0, now boot-2-rb-0")
	if !h.tainted("rb-0") {
		t.Fatal("untainted before the condition is healthy")
	}
	// The agent of the new boot drops the earlier boot's log fault.
	h.heal("rb-0", "KernelReady")
	h.eventually("rb-0 back in service", func() bool { return h.untouched("rb-0") && h.since("rb-0") == "" })
	h.waitEvent("rb-0", "NodeReturnedToService", "Reboot (rung 1 of 2, attempt 1 of 1): rebooted (boot boot-1-rb-0 → boot-2-rb-0) and healthy")
	n := h.get("rb-0")
	if n.Spec.Unschedulable || h.state(n).Ladder == nil {
		t.Errorf("rb-0: unschedulable %v, ladder record %q", n.Spec.Unschedulable, n.Annotations[record.StateAnnotation])
	}
	if got := len(h.orders("rb-0")); got != 1 {
		t.Errorf("%d orders, want 1", got)
	}
	if h.rungs("Reboot", "Ordered") != 1 || h.rungs("Reboot", "Rebooted") != 1 || h.rungs("Reboot", "Repaired") != 1 {
		t.Errorf("rung metrics: ordered %v rebooted %v repaired %v", h.rungs("Reboot", "Ordered"), h.rungs("Reboot", "Rebooted"), h.rungs("Reboot", "Repaired"))
	}
	// The record's window ends an hour later and is removed then.
	h.advance(time.Hour)
	h.eventually("ladder record removed after its window", func() bool {
		return h.record("rb-0").Ladder == nil
	})
}

// No new boot ID within the timeout: the next rung, Quarantine (cordon and
// taint), which holds until a person releases the node. The quarantined
// node keeps counting for the gate.
func TestNoRebootWithinTheTimeoutQuarantinesUntilReleased(t *testing.T) {
	h := start(t, withLadder)
	for _, n := range []string{"nq-0", "nq-1", "nq-2", "nq-3", "nq-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("nq-0"))
	o := h.waitOrder("nq-0", v1alpha1.HostReboot)
	h.report(o, v1alpha1.RemediationAccepted, "accepted")
	started := h.attempt("nq-0").Started
	h.advanceTo(started.Add(15*time.Minute - time.Second))
	h.consistently("still remediating just before the timeout", func() bool { return h.phase("nq-0") == string(record.PhaseRemediating) })
	h.advanceTo(started.Add(15 * time.Minute))
	h.eventually("nq-0 quarantined", func() bool { return h.phase("nq-0") == string(record.PhaseQuarantined) })
	h.waitEvent("nq-0", "NodeRemediationFailed", "no new boot ID within 15m0s")
	h.waitEvent("nq-0", "NodeQuarantined", "kubectl mend release nq-0")
	n := h.get("nq-0")
	if !n.Spec.Unschedulable || !record.HasTaint(n) || !h.state(n).Cordoned {
		t.Fatalf("quarantined node: unschedulable %v, taint %v", n.Spec.Unschedulable, record.HasTaint(n))
	}
	if v := gauge(t, h, "nodemend_quarantined_nodes", "pool", "cluster"); v != 1 {
		t.Errorf("quarantined gauge %v", v)
	}
	// Healthy again, it stays quarantined (healthyFor is 24h by default).
	h.heal("nq-0", "KernelReady")
	h.advance(time.Hour)
	h.consistently("stays quarantined", func() bool { return h.phase("nq-0") == string(record.PhaseQuarantined) })

	reason := "GPU reseated"
	h.annotate("nq-0", record.ReleaseAnnotation, &reason)
	h.eventually("released", func() bool { return h.untouched("nq-0") })
	n = h.get("nq-0")
	if n.Spec.Unschedulable || n.Annotations[record.ReleaseAnnotation] != "" || h.state(n).Ladder != nil {
		t.Errorf("released node: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	h.waitEvent("nq-0", "NodeQuarantineReleased", "released by GPU reseated")
	if got := len(h.orders("nq-0")); got != 1 {
		t.Errorf("%d orders, want 1", got)
	}
}

// A quarantined node that stays healthy for quarantine.healthyFor is
// released by itself; a node cordoned by someone else stays cordoned.
func TestQuarantineReleasedAfterHealthyFor(t *testing.T) {
	h := start(t, withLadder)
	h.policy("quick", v1alpha1.NodeRepairPolicySpec{
		Ladder:     []v1alpha1.LadderRung{{Action: v1alpha1.LadderQuarantine}},
		Quarantine: &v1alpha1.QuarantinePolicy{HealthyFor: &metav1.Duration{Duration: 2 * time.Hour}},
	})
	for _, n := range []string{"qh-0", "qh-1", "qh-2", "qh-3", "qh-4"} {
		h.node(n)
	}
	cordon := corev1.Node{}
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: "qh-0"}, &cordon); err != nil {
		t.Fatal(err)
	}
	cordon.Spec.Unschedulable = true
	if err := k8s.Update(h.ctx, &cordon); err != nil {
		t.Fatal(err)
	}
	h.advanceTo(h.expire("qh-0"))
	h.eventually("qh-0 quarantined", func() bool { return h.phase("qh-0") == string(record.PhaseQuarantined) })
	h.heal("qh-0", "KernelReady")
	h.eventually("healthy since recorded", func() bool { return !h.record("qh-0").HealthySince.Time.IsZero() })
	since := h.clock.Now()
	h.advanceTo(since.Add(2*time.Hour - time.Second))
	h.consistently("not yet", func() bool { return h.phase("qh-0") == string(record.PhaseQuarantined) })
	h.advanceTo(since.Add(2 * time.Hour))
	h.eventually("released after 2h healthy", func() bool { return h.phase("qh-0") == "" && !h.tainted("qh-0") })
	if !h.get("qh-0").Spec.Unschedulable {
		t.Error("the release uncordoned a node nodemend had not cordoned")
	}
	h.waitEvent("qh-0", "NodeQuarantineReleased", "healthy for 2h0m0s")
}

// The fault back within the window after a verified reboot continues the
// ladder at once (no new toleration): here with the second attempt of
// Reboot, then Quarantine.
func TestFaultBackWithinTheWindowContinuesTheLadder(t *testing.T) {
	h := start(t, withLadder)
	h.policy("twice", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{
		{Action: v1alpha1.LadderReboot, Attempts: 2, Window: &metav1.Duration{Duration: 2 * time.Hour}},
		{Action: v1alpha1.LadderQuarantine},
	}})
	for _, n := range []string{"fb-0", "fb-1", "fb-2", "fb-3", "fb-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("fb-0"))
	boot := 1
	reboot := func() {
		t.Helper()
		o := h.waitOrder("fb-0", v1alpha1.HostReboot)
		h.report(o, v1alpha1.RemediationAccepted, "accepted")
		boot++
		if err := repairtest.Reboot(h.ctx, k8s, "fb-0", "boot-"+string(rune('0'+boot))); err != nil {
			t.Fatal(err)
		}
		h.eventually("verified", func() bool { a := h.attempt("fb-0"); return a != nil && !a.Verified.IsZero() })
		h.heal("fb-0", "KernelReady")
		h.eventually("back in service", func() bool { return h.untouched("fb-0") })
	}
	reboot()
	// Back 30 minutes later: tainted at once, second attempt.
	h.advance(30 * time.Minute)
	h.fault("fb-0", "KernelReady", "False", "KernelDeadlock", h.clock.Now())
	h.eventually("tainted again without a toleration", func() bool { return h.tainted("fb-0") })
	if a := h.attempt("fb-0"); a == nil || a.Action != v1alpha1.LadderReboot || a.Attempt != 2 {
		t.Fatalf("attempt %+v, want Reboot attempt 2", a)
	}
	reboot()
	h.advance(30 * time.Minute)
	h.fault("fb-0", "KernelReady", "False", "KernelDeadlock", h.clock.Now())
	h.eventually("quarantined on the third time", func() bool { return h.phase("fb-0") == string(record.PhaseQuarantined) })
	if got := len(h.orders("fb-0")); got != 2 {
		t.Errorf("%d orders, want 2", got)
	}
}

// A GPU fault that a reset resolves goes reset → healthy, without a reboot.
func TestResetAcceleratorRepairsWithoutAReboot(t *testing.T) {
	h := start(t, withLadder)
	for _, n := range []string{"ra-0", "ra-1", "ra-2", "ra-3", "ra-4"} {
		h.node(n)
	}
	h.fault("ra-0", "AcceleratedHardwareReady", "False", health.ReasonNvidiaXID48Error, h.t0)
	h.waitRecorded("ra-0")
	h.advanceTo(h.t0.Add(10 * time.Minute))
	o := h.waitOrder("ra-0", v1alpha1.HostResetAccelerator)
	if o.Spec.ActiveDeadlineSeconds != 100 || len(o.Spec.Devices) != 0 {
		t.Errorf("order %+v", o.Spec)
	}
	h.report(o, v1alpha1.RemediationSucceeded, "reset and healthy: 0000:3b:00.0")
	h.heal("ra-0", "AcceleratedHardwareReady")
	h.eventually("ra-0 back in service", func() bool { return h.untouched("ra-0") })
	h.waitEvent("ra-0", "NodeReturnedToService", "ResetAccelerator (rung 1 of 3, attempt 1 of 1): accelerators reset and healthy")
	if h.get("ra-0").Status.NodeInfo.BootID != "boot-1-ra-0" || len(h.orders("ra-0")) != 1 {
		t.Error("a reboot was ordered too")
	}
}

// With the GPU busy the agent refuses the reset: the ladder escalates to
// Reboot.
func TestBusyGPUEscalatesToReboot(t *testing.T) {
	h := start(t, withLadder)
	for _, n := range []string{"rb-busy", "rbb-1", "rbb-2", "rbb-3", "rbb-4"} {
		h.node(n)
	}
	h.fault("rb-busy", "AcceleratedHardwareReady", "False", health.ReasonNvidiaXID95Error, h.t0)
	h.waitRecorded("rb-busy")
	h.advanceTo(h.t0.Add(10 * time.Minute))
	o := h.waitOrder("rb-busy", v1alpha1.HostResetAccelerator)
	h.report(o, v1alpha1.RemediationRefused, "accelerator in use: processes hold the GPUs to reset (pid name: 48211 python3)")
	r := h.waitOrder("rb-busy", v1alpha1.HostReboot)
	h.waitEvent("rb-busy", "NodeRemediationFailed", "the agent reports the reset Refused: accelerator in use")
	if !strings.HasPrefix(r.Name, "rb-busy-reboot-") || r.Spec.BootID != "boot-1-rb-busy" {
		t.Errorf("reboot order %s %+v", r.Name, r.Spec)
	}
	h.report(r, v1alpha1.RemediationAccepted, "accepted")
	if err := repairtest.Reboot(h.ctx, k8s, "rb-busy", "boot-2"); err != nil {
		t.Fatal(err)
	}
	h.heal("rb-busy", "AcceleratedHardwareReady")
	h.eventually("back in service", func() bool { return h.untouched("rb-busy") })
	// The rung is counted once its return is written: the node can be seen
	// back in service a moment before.
	h.eventually("rung metrics: reset failed 1, reboot repaired 1", func() bool {
		return h.rungs("ResetAccelerator", "Failed") == 1 && h.rungs("Reboot", "Repaired") == 1
	})
}

// action: Replace keeps meaning what it meant on a node no engine owns: the
// Node object is deleted, no order is made.
func TestActionReplaceStillReplaces(t *testing.T) {
	h := start(t, withLadder)
	h.policy("replace", v1alpha1.NodeRepairPolicySpec{Action: v1alpha1.ActionReplace})
	for _, n := range []string{"ar-0", "ar-1", "ar-2", "ar-3", "ar-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("ar-0"))
	h.eventually("ar-0 deleted", func() bool { return h.gone("ar-0") })
	if len(h.orders("ar-0")) != 0 {
		t.Error("an order was made")
	}
}

// A policy's own drain.deadline reaches the drain, wake-up included: with
// the drain poll an hour apart, only the wake-up at the policy's 3-minute
// deadline can delete the pod a PodDisruptionBudget protects (the default
// deadline is 10 minutes).
func TestPolicyDrainDeadlineEndToEnd(t *testing.T) {
	h := start(t, withLadder, func(o *controller.Options) { o.DrainPollInterval = time.Hour })
	ns := "deadline"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	h.policy("short-drain", v1alpha1.NodeRepairPolicySpec{Action: v1alpha1.ActionReplace,
		Drain: &v1alpha1.DrainPolicy{Mode: v1alpha1.DrainEvict, Deadline: &metav1.Duration{Duration: 3 * time.Minute}}})
	for _, n := range []string{"dd-0", "dd-1", "dd-2", "dd-3", "dd-4"} {
		h.node(n)
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "guarded", "dd-0", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")))
	must[*policyv1PDB](t)(repairtest.PDB(h.ctx, k8s, ns, "db", "db", 1, 0))
	started := h.expire("dd-0")
	h.advanceTo(started)
	h.waitEvent("dd-0", "NodeDrainBlocked", "retrying until the deadline "+started.Add(3*time.Minute).UTC().Format(time.RFC3339))
	h.advanceTo(started.Add(3*time.Minute - time.Second))
	h.consistently("guarded pod kept until the policy's deadline", func() bool { return !h.podTerminating(ns, "guarded") })
	h.advanceTo(started.Add(3 * time.Minute))
	h.eventually("guarded pod deleted at the policy's deadline", func() bool { return h.podTerminating(ns, "guarded") })
	h.waitEvent("dd-0", "NodeDrainDeadlineExceeded", "drain deadline 3m0s passed")
}

// A node that reports no boot ID (a kubelet that has not reported it yet,
// or re-registered) cannot carry a Reboot: nothing binds the order to a
// boot and nothing could verify it. The rung fails at once — no order, no
// wait for its timeout — and the ladder goes on to Quarantine.
func TestNoBootIDFailsARebootAtOnce(t *testing.T) {
	h := start(t, withLadder)
	for _, n := range []string{"nb-0", "nb-1", "nb-2", "nb-3", "nb-4"} {
		h.node(n)
	}
	n := h.get("nb-0")
	n.Status.NodeInfo.BootID = ""
	if err := k8s.Status().Update(h.ctx, n); err != nil {
		t.Fatal(err)
	}
	h.advanceTo(h.expire("nb-0"))
	// No clock step after the toleration: the rung's 15-minute timeout is
	// never waited out.
	h.eventually("nb-0 quarantined without waiting", func() bool { return h.phase("nb-0") == string(record.PhaseQuarantined) })
	h.waitEvent("nb-0", "NodeRemediationFailed", "no boot ID")
	if got := h.orders("nb-0"); len(got) != 0 {
		t.Errorf("%d orders for a node without a boot ID, want none", len(got))
	}
}
