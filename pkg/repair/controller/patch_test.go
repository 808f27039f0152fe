package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/controller"
)

// TestNodePatchFallsBackToTheWholeDiff: a write of the repair's fields is
// the small patch; a write that changes anything else is diffed whole, so
// that nothing the caller changed is dropped from the request.
func TestNodePatchFallsBackToTheWholeDiff(t *testing.T) {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "7"}, Spec: corev1.NodeSpec{ProviderID: "a"}}
	tainted := old.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	data, err := controller.NodePatch(old, true).Data(tainted)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`; string(data) != want {
		t.Errorf("repair write: %s, want %s", data, want)
	}
	other := tainted.DeepCopy()
	other.Spec.ProviderID = "b"
	got, err := controller.NodePatch(old, true).Data(other)
	if err != nil {
		t.Fatal(err)
	}
	want, err := client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}).Data(other)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("other write: %s, want the whole diff %s", got, want)
	}
}
