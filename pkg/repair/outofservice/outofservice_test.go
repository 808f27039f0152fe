package outofservice

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	node := func(ready corev1.ConditionStatus, tainted bool) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		if tainted {
			n.Spec.Taints = []corev1.Taint{Taint()}
		}
		return n
	}
	dead := Input{Node: node(corev1.ConditionUnknown, false), OutOfService: true, AgentSilent: true, Started: t0, DrainDeadline: 10 * time.Minute, Now: t0.Add(10 * time.Minute)}
	for _, tc := range []struct {
		name string
		in   func(Input) Input
		want Action
	}{
		{"dead, out of service, deadline passed", func(in Input) Input { return in }, Add},
		{"before the drain deadline", func(in Input) Input { in.Now = t0.Add(9 * time.Minute); return in }, Keep},
		{"the kubelet still reports (NotReady, not gone)", func(in Input) Input { in.Node = node(corev1.ConditionFalse, false); return in }, Keep},
		{"the agent still heartbeats", func(in Input) Input { in.AgentSilent = false; return in }, Keep},
		{"not left out of service (a rung under way)", func(in Input) Input { in.OutOfService = false; return in }, Keep},
		{"tainted, still gone", func(in Input) Input { in.Node = node(corev1.ConditionUnknown, true); return in }, Keep},
		{"tainted, the kubelet is back", func(in Input) Input { in.Node = node(corev1.ConditionTrue, true); return in }, Remove},
		{"tainted, back, no longer under repair", func(in Input) Input {
			in.Node, in.OutOfService = node(corev1.ConditionTrue, true), false
			return in
		}, Remove},
	} {
		got, why := Decide(tc.in(dead))
		if got != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
		if got == Add && !strings.Contains(why, "drain deadline passed at 2026-03-01T12:10:00Z") {
			t.Errorf("%s: %s", tc.name, why)
		}
	}
	if !KubeletGone(&corev1.Node{}) {
		t.Error("a node without a Ready condition has no kubelet reporting")
	}
}
