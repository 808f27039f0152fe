package cli

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNode is a node as the kubelet registers it: capacity, Ready, and
// whatever the test adds.
type testNode struct {
	name        string
	labels      map[string]string
	annotations map[string]string
	taints      []corev1.Taint
	allocatable corev1.ResourceList
	conditions  []corev1.NodeCondition
	created     time.Time
}

// createNode creates n in the API (status written through the status
// subresource, as the kubelet does) and deletes it when the test ends.
func createNode(t *testing.T, n testNode) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{corev1.LabelHostname: n.name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	for k, v := range n.labels {
		labels[k] = v
	}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels, Annotations: n.annotations}, Spec: corev1.NodeSpec{Taints: n.taints}}
	created, err := core.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{}) })
	alloc := n.allocatable
	if alloc == nil {
		alloc = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")}
	}
	// The NodeRestriction/TaintNodesByCondition admission adds
	// node.kubernetes.io/not-ready at creation; the node lifecycle
	// controller (not running here) removes it once the node is Ready.
	created.Spec.Taints = n.taints
	if created, err = core.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	created.Status.Capacity, created.Status.Allocatable = alloc, alloc
	created.Status.Conditions = n.conditions
	if created.Status.Conditions == nil {
		created.Status.Conditions = []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, time.Now().Add(-time.Hour))}
	}
	updated, err := core.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

func readyCondition(s corev1.ConditionStatus, since time.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: s, Reason: "KubeletReady", Message: "kubelet is posting ready status",
		LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(since)}
	if s != corev1.ConditionTrue {
		c.Reason, c.Message = "KubeletNotReady", "container runtime network not ready"
	}
	return c
}

func condition(t string, s corev1.ConditionStatus, reason, msg string, since time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeConditionType(t), Status: s, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(since)}
}

// namespace creates a namespace for the test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	_, err := core.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func pausePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
}
