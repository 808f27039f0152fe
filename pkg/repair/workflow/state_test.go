package workflow

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestStateRoundTrip(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoExecute}}}}
	s, err := Read(n)
	if err != nil || s.InRepair() || s.Tainted || len(s.Since) != 0 {
		t.Fatalf("fresh node: %+v %v", s, err)
	}
	since := unhealthy.Since{"KernelReady": t0}
	trigger := corev1.NodeCondition{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"}
	started := Started(WithSince(n, since), since, trigger, "gpu", ladder.Attempt{Position: ladder.First, Action: v1alpha1.LadderReplace, Of: 1, Started: t0.Add(30 * time.Minute)}, t0.Add(30*time.Minute))
	if len(n.Annotations) != 0 || len(n.Spec.Taints) != 1 {
		t.Fatal("Started modified its input")
	}
	s, err = Read(started)
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != PhaseDraining || !s.Started.Equal(t0.Add(30*time.Minute)) || s.Reason != "KernelReady=False/KernelDeadlock" ||
		s.Condition != "KernelReady" || s.Policy != "gpu" || !s.Tainted || !s.Since.Equal(since) {
		t.Errorf("started state %+v", s)
	}
	if len(started.Spec.Taints) != 2 || started.Spec.Taints[1] != Taint("KernelReady") {
		t.Errorf("taints %+v", started.Spec.Taints)
	}
	if ConditionReason(s.Reason) != "KernelDeadlock" {
		t.Errorf("ConditionReason = %q", ConditionReason(s.Reason))
	}
	target := backend.Target{Backend: backend.Karpenter, APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "nc-1", UID: "u2"}
	handed := HandedOver(started, target, t0.Add(40*time.Minute))
	s, err = Read(handed)
	if err != nil || s.Phase != PhaseTerminating || s.Target == nil || *s.Target != target || !s.Drained.Equal(t0.Add(40*time.Minute)) {
		t.Errorf("handed over: %+v %v", s, err)
	}
	failed := MarkedFailed(handed, t0.Add(2*time.Hour))
	if s, _ := Read(failed); !s.Failed.Equal(t0.Add(2 * time.Hour)) {
		t.Errorf("failed: %+v", s)
	}
	cleared := WithSince(n, nil)
	if _, ok := cleared.Annotations[UnhealthySinceAnnotation]; ok {
		t.Error("empty since not removed")
	}
}

func TestReadRefusesInconsistentState(t *testing.T) {
	tests := map[string]map[string]string{
		"unknown phase":              {PhaseAnnotation: "Rebooting"},
		"phase without start":        {PhaseAnnotation: "Draining"},
		"terminating without target": {PhaseAnnotation: "Terminating", StartedAnnotation: "2026-03-01T12:00:00Z"},
		"bad time":                   {PhaseAnnotation: "Draining", StartedAnnotation: "yesterday"},
		"bad since":                  {UnhealthySinceAnnotation: "{"},
		"bad target":                 {PhaseAnnotation: "Terminating", StartedAnnotation: "2026-03-01T12:00:00Z", TargetAnnotation: `{"kind":"NodeClaim"}`},
	}
	for name, ann := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Read(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestVeto(t *testing.T) {
	s, _ := Read(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{VetoAnnotation: "debugging"}}})
	if !s.Vetoed || s.Veto != "debugging" {
		t.Errorf("veto %+v", s)
	}
}

func pod(name string, terminating bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: t0}
	}
	return p
}

func TestPlanDrain(t *testing.T) {
	live, gone := pod("a", false), pod("b", true)
	tests := []struct {
		name                       string
		pods                       []corev1.Pod
		mode                       v1alpha1.DrainMode
		pastDeadline, kubeletAlive bool
		evict, del, terminating    int
		done                       bool
	}{
		{"empty node", nil, v1alpha1.DrainEvict, false, true, 0, 0, 0, true},
		{"evict before the deadline", []corev1.Pod{live, gone}, v1alpha1.DrainEvict, false, true, 1, 0, 1, false},
		{"delete after the deadline", []corev1.Pod{live, gone}, v1alpha1.DrainEvict, true, true, 0, 1, 1, false},
		{"wait for terminating pods", []corev1.Pod{gone}, v1alpha1.DrainEvict, false, true, 0, 0, 1, false},
		{"not past the deadline when the kubelet is gone", []corev1.Pod{gone}, v1alpha1.DrainEvict, false, false, 0, 0, 1, true},
		{"deadline ends the wait", []corev1.Pod{gone}, v1alpha1.DrainEvict, true, true, 0, 0, 1, true},
		{"delete mode", []corev1.Pod{live}, v1alpha1.DrainDelete, false, true, 0, 1, 0, false},
		{"skip mode", []corev1.Pod{live}, v1alpha1.DrainSkip, false, true, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanDrain(tt.pods, tt.mode, tt.pastDeadline, tt.kubeletAlive)
			if len(p.Evict) != tt.evict || len(p.Delete) != tt.del || p.Terminating != tt.terminating || p.Done != tt.done {
				t.Errorf("plan = evict %d delete %d terminating %d done %v", len(p.Evict), len(p.Delete), p.Terminating, p.Done)
			}
		})
	}
}

func TestReasonFormat(t *testing.T) {
	r := Reason(corev1.NodeCondition{Type: "Ready", Status: "Unknown"})
	if r != "Ready=Unknown" || !strings.HasPrefix(r, string(conditionOf(r))) || ConditionReason(r) != "" {
		t.Errorf("Reason = %q", r)
	}
}
