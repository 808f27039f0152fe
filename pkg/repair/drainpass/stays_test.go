package drainpass

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

func TestStaysThroughRepair(t *testing.T) {
	for _, tc := range []struct {
		name string
		tol  []corev1.Toleration
		want bool
	}{
		{"no tolerations", nil, false},
		{"the repair taint by key", []corev1.Toleration{{Key: v1alpha1.RepairTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, true},
		{"the repair taint for one condition", []corev1.Toleration{{Key: v1alpha1.RepairTaintKey, Operator: corev1.TolerationOpEqual, Value: "KernelReady"}}, true},
		{"a wildcard says nothing about repairs", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, false},
		{"another taint", []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists}}, false},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tol}}
		if got := StaysThroughRepair(p); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
