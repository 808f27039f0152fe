package deploytest

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func newRemediation(t *testing.T, name, node string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeName": node, "action": "Reboot", "bootID": "boot-1", "activeDeadlineSeconds": int64(300)},
	}}
	return Must[*unstructured.Unstructured](t)(dyn.Resource(nremResource).Create(t.Context(), u, metav1.CreateOptions{}))
}

// A reboot order: the agent on node A accepts (writes the status of) node A's
// orders only; it cannot create one, change one's spec, accept node B's, or
// delete one.
func TestAgentMayAcceptOnlyItsOwnNodesRemediations(t *testing.T) {
	ctx := t.Context()
	a := agentOn(t, "rem-a")
	agentOn(t, "rem-b")
	newRemediation(t, "reboot-a", "rem-a")
	newRemediation(t, "reboot-b", "rem-b")
	accept := func(name string) error {
		u, err := a.dyn.Resource(nremResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedField(u.Object, "Accepted", "status", "phase")
		_, err = a.dyn.Resource(nremResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	}
	if err := accept("reboot-a"); err != nil {
		t.Errorf("A accepting its own order: %v", err)
	}
	if err := accept("reboot-b"); err == nil || !strings.Contains(err.Error(), "may not write NodeRemediation reboot-b of node rem-b") {
		t.Errorf("A accepting node B's order: %v, want a refusal", err)
	}
	forged := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
		"metadata": map[string]any{"name": "forged"},
		"spec":     map[string]any{"nodeName": "rem-b", "action": "Reboot", "bootID": "x", "activeDeadlineSeconds": int64(300)},
	}}
	if _, err := a.dyn.Resource(nremResource).Create(ctx, forged, metav1.CreateOptions{}); err == nil {
		t.Error("A created an order")
	}
	if err := a.dyn.Resource(nremResource).Delete(ctx, "reboot-b", metav1.DeleteOptions{}); err == nil {
		t.Error("A deleted an order")
	}
	// The spec is immutable for everyone, the admin included.
	u := Must[*unstructured.Unstructured](t)(dyn.Resource(nremResource).Get(ctx, "reboot-a", metav1.GetOptions{}))
	_ = unstructured.SetNestedField(u.Object, "rem-b", "spec", "nodeName")
	if _, err := dyn.Resource(nremResource).Update(ctx, u, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("moving an order to another node: %v, want refused as immutable", err)
	}
}
