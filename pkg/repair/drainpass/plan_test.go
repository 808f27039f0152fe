package drainpass

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

func pod(name string, terminating bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
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
