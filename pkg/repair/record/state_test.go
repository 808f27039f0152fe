package record

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u1", Annotations: map[string]string{"example.com/owner": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoExecute}}}}
}

// A repair's steps, each put on the node by Apply and read back by Read:
// the record read is the record written, and the taint and cordon follow
// the record.
func TestStepsRoundTripThroughTheNode(t *testing.T) {
	n := node()
	s, err := Read(n)
	if err != nil || s.InRepair() || s.Tainted || len(s.Since) != 0 || s.Legacy {
		t.Fatalf("fresh node: %+v %v", s, err)
	}
	write := func(prev, next Record) State {
		t.Helper()
		updated := Apply(n, prev, next)
		got, err := Read(updated)
		if err != nil {
			t.Fatalf("reading %s: %v", updated.Annotations[StateAnnotation], err)
		}
		want := next
		if !want.IsZero() {
			want.Version = v1alpha1.RepairRecordVersion // Encode sets it
		}
		if !equality.Semantic.DeepEqual(got.Record, want) {
			t.Fatalf("read back\n%+v\nwrote\n%+v", got.Record, next)
		}
		n = updated
		return got
	}
	since := unhealthy.Since{"KernelReady": t0}
	trigger := corev1.NodeCondition{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"}
	rec := WithSince(Record{}, since)
	s = write(Record{}, rec)
	if !s.Since.Equal(since) || s.Tainted {
		t.Fatalf("unhealthy: %+v", s)
	}
	start := t0.Add(30*time.Minute + 400*time.Millisecond)
	attempt := v1alpha1.RungAttempt{RungPosition: ladder.First, Action: v1alpha1.LadderReboot, Of: 1, Started: metav1.NewTime(start),
		Timeout: metav1.Duration{Duration: 10 * time.Minute}}
	started := Start(rec, since, trigger, "gpu", attempt, start, nil)
	s = write(rec, started)
	if s.Phase != PhaseDraining || !s.Started.Equal(&metav1.Time{Time: t0.Add(30 * time.Minute)}) || s.Trigger.String() != "KernelReady=False/KernelDeadlock" ||
		s.Policy != "gpu" || !s.Tainted || !s.Since.Equal(since) || s.Rung.Timeout.Duration != 10*time.Minute {
		t.Errorf("started state %+v", s)
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[1] != Taint("KernelReady") || n.Spec.Unschedulable {
		t.Errorf("started: taints %+v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
	}
	target := v1alpha1.RepairTarget{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "nc-1", UID: "u2"}
	handed := HandOver(started, target, t0.Add(40*time.Minute))
	s = write(started, handed)
	if s.Phase != PhaseTerminating || *s.Target != target || !s.Drained.Equal(&metav1.Time{Time: t0.Add(40 * time.Minute)}) {
		t.Errorf("handed over: %+v", s)
	}
	failed := Fail(handed, t0.Add(2*time.Hour))
	if s = write(handed, failed); s.Failed.IsZero() {
		t.Errorf("failed: %+v", s)
	}

	// The ladder: quarantined on a schedulable node cordons it; its
	// return lifts the cordon and the taint and keeps the window.
	q := Quarantine(started, attempt, !n.Spec.Unschedulable, t0.Add(50*time.Minute))
	s = write(failed, q)
	if s.Phase != PhaseQuarantined || !s.Cordoned || !n.Spec.Unschedulable {
		t.Errorf("quarantined: %+v, unschedulable %v", s, n.Spec.Unschedulable)
	}
	hs := WithHealthySince(q, t0.Add(55*time.Minute))
	if s = write(q, hs); s.HealthySince.IsZero() {
		t.Errorf("healthy since: %+v", s)
	}
	window := &v1alpha1.LadderRecord{RungPosition: ladder.First, Action: v1alpha1.LadderReboot, Condition: "KernelReady",
		Returned: metav1.NewTime(t0.Add(time.Hour)), Until: metav1.NewTime(t0.Add(2 * time.Hour))}
	back := Return(window)
	s = write(hs, back)
	if s.InRepair() || s.Tainted || n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || s.Ladder == nil || len(s.Since) != 0 {
		t.Errorf("returned: %+v, node %+v", s, n.Spec)
	}
	gone := WithoutLadder(back)
	s = write(back, gone)
	if _, ok := n.Annotations[StateAnnotation]; ok || n.Annotations["example.com/owner"] != "a" {
		t.Errorf("an empty record stays on the node: %v", n.Annotations)
	}
}

// The cordon is lifted only where nodemend set it; the person's acts are
// consumed where the repair acted on them.
func TestApplyConsumesWhatTheRepairActedOn(t *testing.T) {
	n := node()
	n.Spec.Unschedulable = true // a person's cordon
	n.Annotations[RepairNowAnnotation] = "INC-7"
	n.Annotations[VetoAnnotation] = "kept"
	trigger := corev1.NodeCondition{Type: "KernelReady", Status: "False"}
	attempt := v1alpha1.RungAttempt{RungPosition: ladder.First, Action: v1alpha1.LadderQuarantine, Of: 1, Started: metav1.NewTime(t0)}
	s, _ := Read(n)
	if !s.RepairRequested || s.RepairRequest != "INC-7" || !s.Vetoed {
		t.Fatalf("person's acts not read: %+v", s)
	}
	started := Start(Record{}, nil, trigger, "default", attempt, t0, RepairNowAt(s.RepairRequest, t0))
	n = Apply(n, Record{}, started)
	if _, ok := n.Annotations[RepairNowAnnotation]; ok {
		t.Error("the start did not consume the repair-now request")
	}
	if s, _ := Read(n); s.RepairRequest != "" || s.Record.RepairNow == nil || s.Record.RepairNow.Request != "INC-7" {
		t.Errorf("the record does not acknowledge the request: %+v", s)
	}
	q := Quarantine(started, attempt, !n.Spec.Unschedulable, t0)
	n = Apply(n, started, q)
	if q.Cordoned {
		t.Error("a person's cordon recorded as nodemend's")
	}
	n.Annotations[ReleaseAnnotation] = "fixed"
	n = Apply(n, q, Return(nil))
	if !n.Spec.Unschedulable || HasTaint(n) {
		t.Errorf("after the return: unschedulable %v (the person's cordon must stay), tainted %v", n.Spec.Unschedulable, HasTaint(n))
	}
	if _, ok := n.Annotations[ReleaseAnnotation]; ok {
		t.Error("the release was not consumed")
	}
	if n.Annotations[VetoAnnotation] != "kept" {
		t.Error("the veto was touched")
	}
}

func TestReadRefusesARecordThatDoesNotHoldTogether(t *testing.T) {
	tests := map[string]string{
		"unknown phase":              `{"version":1,"phase":"Rebooting","trigger":{"type":"KernelReady","status":"False"},"started":"2026-03-01T12:00:00Z"}`,
		"phase without start":        `{"version":1,"phase":"Draining","trigger":{"type":"KernelReady","status":"False"}}`,
		"phase without trigger":      `{"version":1,"phase":"Draining","started":"2026-03-01T12:00:00Z"}`,
		"terminating without target": `{"version":1,"phase":"Terminating","trigger":{"type":"KernelReady","status":"False"},"started":"2026-03-01T12:00:00Z"}`,
		"bad time":                   `{"version":1,"phase":"Draining","trigger":{"type":"KernelReady","status":"False"},"started":"yesterday"}`,
		"bad timeout":                `{"version":1,"rung":{"rung":0,"attempt":1,"action":"Reboot","of":1,"started":"2026-03-01T12:00:00Z","timeout":"soon"}}`,
		"unknown action":             `{"version":1,"rung":{"rung":0,"attempt":1,"action":"Pray","of":1,"started":"2026-03-01T12:00:00Z"}}`,
		"bad since":                  `{"version":1,"unhealthySince":{"KernelReady":"then"}}`,
		"bad target":                 `{"version":1,"phase":"Terminating","trigger":{"type":"KernelReady","status":"False"},"started":"2026-03-01T12:00:00Z","target":{"kind":"NodeClaim"}}`,
		"newer version":              `{"version":2}`,
		"no version":                 `{"policy":"x"}`,
		"not JSON":                   `{`,
	}
	for name, v := range tests {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{StateAnnotation: v}}}
			if _, err := Read(n); err == nil {
				t.Error("accepted")
			}
			if !InRepair(n) {
				t.Error("an unreadable record is not counted as a repair")
			}
		})
	}
}
