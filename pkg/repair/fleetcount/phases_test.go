package fleetcount

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/record/legacy"
)

// "A node counts as unhealthy ... if it is under repair": "every rung is a
// repair for the gates: a node counts from its taint until it is back in
// service or gone, quarantine included" (docs/repair.md). A node in any
// repair phase counts whatever its conditions say — a rebooted node looks
// healthy while it waits for its verification, a quarantined one while a
// person looks at it — and so does one whose record does not decode (the
// controller leaves it alone) or that carries the previous release's
// phase. A record without a phase (the unhealthy-since clock, a ladder's
// window) does not.
func TestARepairCountsWhateverItsConditionsSay(t *testing.T) {
	set := policies(t, false)
	healthy := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: "KernelReady", Status: corev1.ConditionTrue}}
	t0 := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// The records as the workflow writes them in each phase.
	cond := corev1.NodeCondition{Type: "KernelReady", Status: corev1.ConditionFalse, Reason: "KernelDeadlock"}
	rung := v1alpha1.RungAttempt{RungPosition: v1alpha1.RungPosition{Rung: 0, Attempt: 1}, Action: v1alpha1.LadderReboot, Of: 1, Started: t0,
		Order: "o", BootID: "b1", Timeout: metav1.Duration{Duration: 15 * time.Minute}}
	draining := record.Start(record.Record{}, nil, cond, "default", rung, t0.Time, nil)
	target := v1alpha1.RepairTarget{Backend: "node", APIVersion: "v1", Kind: "Node", Name: "terminating", UID: "u"}
	phases := map[string]v1alpha1.RepairRecord{
		"draining":    draining,
		"terminating": record.HandOver(draining, target, t0.Time),
		"remediating": record.Remediate(draining, rung),
		"quarantined": record.Quarantine(draining, rung, true, t0.Time),
	}
	node := func(name string, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "p", "team": "a"}, Annotations: annotations},
			Status: corev1.NodeStatus{Conditions: healthy}}
	}
	withRecord := func(r v1alpha1.RepairRecord) map[string]string {
		if _, err := v1alpha1.DecodeRepairRecord(r.Encode()); err != nil {
			t.Fatalf("record %+v: %v", r, err)
		}
		return map[string]string{record.StateAnnotation: r.Encode()}
	}
	counted := map[string]*corev1.Node{
		"undecodable": node("undecodable", map[string]string{record.StateAnnotation: `{"version":1,"phase":`}),
		"legacy":      node("legacy", map[string]string{legacy.Phase: "Remediating"}),
	}
	notCounted := map[string]*corev1.Node{
		"clock only": node("clock-only", withRecord(record.WithSince(record.Record{}, map[corev1.NodeConditionType]time.Time{"KernelReady": t0.Time}))),
		"window":     node("window", withRecord(record.Return(&v1alpha1.LadderRecord{RungPosition: v1alpha1.RungPosition{Rung: 0, Attempt: 1}, Action: v1alpha1.LadderReboot, Condition: "KernelReady", Returned: t0, Until: t0}))),
		"no record":  node("plain", nil),
	}
	for phase, r := range phases {
		counted[phase] = node(phase, withRecord(r))
	}
	for name, n := range counted {
		if !Unhealthy(n, set) {
			t.Errorf("%s with healthy conditions: not counted", name)
		}
	}
	for name, n := range notCounted {
		if Unhealthy(n, set) {
			t.Errorf("%s, healthy: counted", name)
		}
	}
	// The same through the tallies and the pool gate: in a pool of 10,
	// maxUnhealthy 20% allows 2; with the repairs above, a node whose fault
	// has just passed its toleration waits.
	c := New(backends.Pools("pool"), false)
	for _, n := range counted {
		c.Upsert(n)
	}
	for _, n := range notCounted {
		c.Upsert(n)
	}
	self := node("self", nil)
	self.Status.Conditions = []corev1.NodeCondition{{Type: "KernelReady", Status: corev1.ConditionFalse}}
	c.Upsert(self)
	p, _ := c.Group(self, c.resolver.Of(self, nil), "", set, nil)
	if want := (gate.Group{Name: p.Name, Size: 10, Unhealthy: 7}); p != want {
		t.Fatalf("pool counted %+v, want %+v", p, want)
	}
	d := gate.Decide(gate.Input{MaxUnhealthy: intstr.FromString("20%"), Pool: p})
	if d.Allowed || d.Gate != gate.Pool {
		t.Errorf("gate: %+v", d)
	}
}
