package controller_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// A person's repair-now request waives the toleration and nothing else:
// an unhealthy node is repaired at once (the request consumed, and kept in
// the record and the event), a healthy one is not (the request removed
// with the reason), and a vetoed one waits with the request in place.
func TestRepairNowWaivesTheTolerationOnly(t *testing.T) {
	h := start(t, withLadder)
	h.policy("quarantine", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{{Action: v1alpha1.LadderQuarantine}}})
	for i := range 10 {
		h.node(fmt.Sprintf("rn-%d", i))
	}
	h.fault("rn-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.fault("rn-2", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.waitRecorded("rn-0")
	h.waitRecorded("rn-2")
	veto := "vendor debugging"
	h.annotate("rn-2", record.VetoAnnotation, &veto)
	h.advance(time.Minute) // 29 minutes of toleration left

	ask := "INC-7: GPU off the bus"
	h.annotate("rn-0", record.RepairNowAnnotation, &ask)
	h.eventually("rn-0 quarantined at once", func() bool { return h.phase("rn-0") == string(record.PhaseQuarantined) })
	n := h.get("rn-0")
	if _, ok := n.Annotations[record.RepairNowAnnotation]; ok {
		t.Error("the request was not consumed")
	}
	if rn := h.state(n).Record.RepairNow; rn == nil || rn.Request != ask || !rn.At.Time.Equal(h.clock.Now()) {
		t.Errorf("the record does not acknowledge the request: %+v", rn)
	}
	ev := h.waitEvent("rn-0", history.Started, "repair requested now")
	if rec, ok := history.Read(ev.Annotations); !ok || rec.RepairNow == nil || rec.RepairNow.Request != ask {
		t.Errorf("the event's record: %+v", rec)
	}

	h.annotate("rn-1", record.RepairNowAnnotation, &ask)
	h.waitEvent("rn-1", history.RepairNowRefused, "no condition of the node is unhealthy")
	h.eventually("the refused request removed", func() bool { _, ok := h.get("rn-1").Annotations[record.RepairNowAnnotation]; return !ok })
	if !h.untouched("rn-1") {
		t.Error("a healthy node repaired on request")
	}

	h.annotate("rn-2", record.RepairNowAnnotation, &ask)
	h.waitEvent("rn-2", history.Blocked, "vendor debugging")
	h.consistently("the vetoed node waits, its request kept", func() bool {
		_, ok := h.get("rn-2").Annotations[record.RepairNowAnnotation]
		return ok && h.untouched("rn-2")
	})
	h.annotate("rn-2", record.VetoAnnotation, nil)
	h.advance(5 * time.Minute) // the recheck
	h.eventually("rn-2 repaired once the veto is gone", func() bool { return h.phase("rn-2") == string(record.PhaseQuarantined) })
}

// A person's release of a quarantined node whose fault is still reported
// waits for the node's status to be healthy: a return to service needs its
// evidence whoever asks.
func TestReleaseWaitsForAHealthyStatus(t *testing.T) {
	h := start(t, withLadder)
	h.policy("quarantine", v1alpha1.NodeRepairPolicySpec{Ladder: []v1alpha1.LadderRung{{Action: v1alpha1.LadderQuarantine}},
		Quarantine: &v1alpha1.QuarantinePolicy{HealthyFor: &metav1.Duration{}}})
	for _, n := range []string{"rw-0", "rw-1", "rw-2", "rw-3", "rw-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("rw-0"))
	h.eventually("rw-0 quarantined", func() bool { return h.phase("rw-0") == string(record.PhaseQuarantined) })
	who := "INC-9"
	h.annotate("rw-0", record.ReleaseAnnotation, &who)
	h.waitEvent("rw-0", history.ReleaseWaiting, "INC-9")
	h.advance(time.Hour)
	h.consistently("still quarantined", func() bool {
		return h.phase("rw-0") == string(record.PhaseQuarantined) && h.get("rw-0").Spec.Unschedulable
	})
	h.heal("rw-0", "KernelReady")
	h.eventually("released once healthy", func() bool { return h.untouched("rw-0") && !h.get("rw-0").Spec.Unschedulable })
	h.waitEvent("rw-0", history.QuarantineReleased, "released by INC-9")
}
