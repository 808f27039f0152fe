package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
)

var seq int

func create(t *testing.T, spec v1alpha1.NodeRepairPolicySpec) error {
	t.Helper()
	seq++
	o := &v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", seq)}, Spec: spec}
	err := k8s.Create(context.Background(), o)
	if err == nil {
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	return err
}

func rule(typ, status string, tol time.Duration) v1alpha1.RepairRule {
	return v1alpha1.RepairRule{ConditionType: typ, Status: corev1.ConditionStatus(status), Toleration: metav1.Duration{Duration: tol}}
}

func TestCRDAcceptsValidPolicies(t *testing.T) {
	pct, count := intstr.FromString("25%"), intstr.FromInt32(2)
	specs := map[string]v1alpha1.NodeRepairPolicySpec{
		"empty": {},
		"full": {
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"karpenter.sh/nodepool": "gpu"}},
			Weight:       10,
			Rules: []v1alpha1.RepairRule{
				rule("AcceleratedHardwareReady", "False", 5*time.Minute),
				{ConditionType: "KernelReady", Status: "False", Toleration: metav1.Duration{Duration: time.Hour}, Reasons: []string{"KernelDeadlock"}},
				rule("Ready", "Unknown", 0),
			},
			MaxUnhealthy:    &pct,
			Drain:           &v1alpha1.DrainPolicy{Mode: v1alpha1.DrainEvict, Deadline: &metav1.Duration{Duration: 20 * time.Minute}},
			Action:          v1alpha1.ActionReplace,
			ScheduledEvents: &v1alpha1.ScheduledEventsPolicy{Action: v1alpha1.ScheduledEventDrain},
		},
		"count": {MaxUnhealthy: &count, Action: v1alpha1.ActionNone, Drain: &v1alpha1.DrainPolicy{Mode: v1alpha1.DrainSkip}},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			if err := create(t, spec); err != nil {
				t.Fatalf("valid policy refused: %v", err)
			}
		})
	}
}

func TestCRDRefuses(t *testing.T) {
	neg, hundredOne, word := intstr.FromInt32(-1), intstr.FromString("101%"), intstr.FromString("half")
	tests := []struct {
		name string
		spec v1alpha1.NodeRepairPolicySpec
		want string
	}{
		{"DiskPressure", v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{rule("DiskPressure", "True", time.Minute)}},
			"DiskPressure, MemoryPressure and PIDPressure are never repair triggers"},
		{"MemoryPressure", v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{rule("KernelReady", "False", time.Minute), rule("MemoryPressure", "True", time.Minute)}},
			"never repair triggers"},
		{"PIDPressure", v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{rule("PIDPressure", "False", time.Minute)}},
			"never repair triggers"},
		{"negative toleration", v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{rule("KernelReady", "False", -time.Minute)}},
			"toleration must not be negative"},
		{"bad status", v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{rule("KernelReady", "Broken", time.Minute)}},
			"Unsupported value"},
		{"scheduled event action", v1alpha1.NodeRepairPolicySpec{ScheduledEvents: &v1alpha1.ScheduledEventsPolicy{Action: "Reboot"}}, "Unsupported value"},
		{"negative count", v1alpha1.NodeRepairPolicySpec{MaxUnhealthy: &neg}, "maxUnhealthy must be a count >= 0 or a percentage"},
		{"percent over 100", v1alpha1.NodeRepairPolicySpec{MaxUnhealthy: &hundredOne}, "maxUnhealthy must be a count >= 0 or a percentage"},
		{"not a number", v1alpha1.NodeRepairPolicySpec{MaxUnhealthy: &word}, "maxUnhealthy must be a count >= 0 or a percentage"},
		{"weight", v1alpha1.NodeRepairPolicySpec{Weight: 1001}, "spec.weight"},
		{"action", v1alpha1.NodeRepairPolicySpec{Action: "Reboot"}, "Unsupported value"},
		{"drain mode", v1alpha1.NodeRepairPolicySpec{Drain: &v1alpha1.DrainPolicy{Mode: "Yank"}}, "Unsupported value"},
		{"negative deadline", v1alpha1.NodeRepairPolicySpec{Drain: &v1alpha1.DrainPolicy{Deadline: &metav1.Duration{Duration: -time.Second}}}, "deadline must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := create(t, tt.spec)
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want Invalid containing %q", err, tt.want)
			}
		})
	}
}
