package sim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/pkg/repair/record"
)

func newJourney() *Journey {
	return &Journey{Node: "sick", Condition: "AcceleratedHardwareReady", at: map[Milestone]time.Time{}, changed: make(chan struct{}),
		pool: "gpu", known: map[string]bool{"sick": true, "other": true}, replicas: 2, selector: labels.SelectorFromSet(labels.Set{"app": "x"}),
		namespace: "ns", onNode: map[string]string{}, podsReady: map[string]bool{}}
}

func node(name string, mutate func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"karpenter.sh/nodepool": "gpu"}, Annotations: map[string]string{}}}
	if mutate != nil {
		mutate(n)
	}
	return n
}

func pod(name, nodeName string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "x"}}, Spec: corev1.PodSpec{NodeName: nodeName}}
	if ready {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

// The journey follows a repair from the objects' changes, in the order
// the API delivers them, and ignores what does not belong to it.
func TestJourneyMilestones(t *testing.T) {
	j := newJourney()
	var told []Milestone
	j.OnMilestone(func(m Milestone, _ time.Time) { told = append(told, m) })
	j.Mark(FaultWritten, time.Now())
	j.onPodEvent(pod("a", "sick", true), false)
	j.onPodEvent(pod("b", "other", true), false)

	// A node of the pool launched before the repair is not a replacement.
	j.onNodeEvent(node("early", nil), false)
	j.onNodeEvent(node("sick", func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: "AcceleratedHardwareReady", Status: corev1.ConditionFalse}}
	}), false)
	j.onNodeEvent(node("sick", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, record.Taint("AcceleratedHardwareReady"))
	}), false)
	if j.Replacement() != "" {
		t.Fatalf("replacement %q before any node was launched for the repair", j.Replacement())
	}
	// The pod on the sick node is evicted; its successor is pending.
	j.onPodEvent(pod("a", "sick", true), true)
	j.onPodEvent(pod("c", "", false), false)
	j.onNodeEvent(node("sick", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, record.Taint("AcceleratedHardwareReady"))
		n.Annotations[record.StateAnnotation] = `{"version":1,"phase":"Terminating","started":"2026-03-01T12:00:00Z",` +
			`"trigger":{"type":"AcceleratedHardwareReady","status":"False"},"target":{"backend":"node","apiVersion":"v1","kind":"Node","name":"sick"}}`
	}), false)
	claim := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"nodeName": "sick"}}}
	claim.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	j.onClaimEvent(claim, false)
	j.onNodeEvent(node("new", nil), false)
	j.onNodeEvent(node("new", func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}), false)
	j.onPodEvent(pod("c", "new", true), false)
	j.onNodeEvent(node("sick", nil), true)

	want := []Milestone{FaultWritten, ConditionFalse, Tainted, PodsEvicted, HandedOver, NodeClaimDeleted,
		ReplacementCreated, ReplacementReady, PodsRunning, NodeGone}
	if len(told) != len(want) {
		t.Fatalf("milestones %v, want %v", told, want)
	}
	for i := range want {
		if told[i] != want[i] {
			t.Fatalf("milestone %d is %q, want %q (all: %v)", i, told[i], want[i], told)
		}
	}
	if j.Replacement() != "new" {
		t.Errorf("replacement %q, want new", j.Replacement())
	}
	steps := j.Durations()
	for i := 1; i < len(steps); i++ {
		if steps[i].At.Before(steps[i-1].At) || steps[i].SincePrevious != steps[i].At.Sub(steps[i-1].At) {
			t.Fatalf("steps out of order or mis-timed: %+v", steps)
		}
	}
}

// Pods never seen on the sick node do not make "evicted" true: a journey
// watched too late must not report a drain it did not see.
func TestJourneyNeedsPodsOnTheNode(t *testing.T) {
	j := newJourney()
	j.onNodeEvent(node("sick", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, record.Taint("AcceleratedHardwareReady"))
	}), false)
	j.onPodEvent(pod("b", "other", true), false)
	if _, ok := j.At(PodsEvicted); ok {
		t.Fatal("PodsEvicted without a pod ever on the node")
	}
}
