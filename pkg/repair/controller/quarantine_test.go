package controller_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// quarantine.healthyFor 0: "only a person releases it". A quarantined node
// whose conditions are all healthy stays quarantined (cordoned, tainted,
// counted) however long, with no healthy spell recorded, until a person
// releases it.
func TestHealthyForZeroKeepsAHealthyNodeQuarantined(t *testing.T) {
	h := start(t, withLadder)
	h.policy("person-only", v1alpha1.NodeRepairPolicySpec{
		Ladder:     []v1alpha1.LadderRung{{Action: v1alpha1.LadderQuarantine}},
		Quarantine: &v1alpha1.QuarantinePolicy{HealthyFor: &metav1.Duration{}},
	})
	for _, n := range []string{"qz-0", "qz-1", "qz-2", "qz-3", "qz-4"} {
		h.node(n)
	}
	h.advanceTo(h.expire("qz-0"))
	h.eventually("qz-0 quarantined", func() bool { return h.phase("qz-0") == string(record.PhaseQuarantined) })
	h.heal("qz-0", "KernelReady")
	h.advance(time.Minute)
	h.advance(365 * 24 * time.Hour)
	h.consistently("a healthy node stays quarantined", func() bool {
		n := h.get("qz-0")
		return h.state(n).Phase == record.PhaseQuarantined && h.state(n).HealthySince.Time.IsZero() && record.HasTaint(n) && n.Spec.Unschedulable
	})
	reason := "checked by hand"
	h.annotate("qz-0", record.ReleaseAnnotation, &reason)
	h.eventually("released by a person", func() bool { return h.untouched("qz-0") })
	h.waitEvent("qz-0", "NodeQuarantineReleased", "released by checked by hand")
}
