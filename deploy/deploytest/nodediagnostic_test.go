package deploytest

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// newDiagnostic creates a NodeDiagnostic that captures logs of the given
// categories (default: base).
func newDiagnostic(t *testing.T, name, node string, categories ...any) *unstructured.Unstructured {
	t.Helper()
	if len(categories) == 0 {
		categories = []any{"base"}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeDiagnostic",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeName": node, "logCapture": map[string]any{"categories": categories}},
	}}
	return Must[*unstructured.Unstructured](t)(dyn.Resource(ndiagResource).Create(t.Context(), u, metav1.CreateOptions{}))
}

// writeStatus does what the agent's diagnostics runner does: read the
// object, set its status, PUT the status subresource.
func writeStatus(ctx context.Context, c dynamic.Interface, name, state string) error {
	u, err := c.Resource(ndiagResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	_ = unstructured.SetNestedField(u.Object, state, "status", "logCapture", "state")
	_, err = c.Resource(ndiagResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// NodeDiagnostic status: the agent on node A writes the status of node A's
// objects only, and never their spec; the same holds for an agent run by
// systemd with node A's kubelet identity.
func TestAgentMayWriteOnlyItsOwnNodesDiagnostics(t *testing.T) {
	ctx := t.Context()
	a := agentOn(t, "diag-a")
	agentOn(t, "diag-b")
	newDiagnostic(t, "logs-a", "diag-a")
	newDiagnostic(t, "logs-b", "diag-b")

	if err := writeStatus(ctx, a.dyn, "logs-a", "Running"); err != nil {
		t.Errorf("A writing the status of its own NodeDiagnostic: %v", err)
	}
	if err := writeStatus(ctx, a.dyn, "logs-b", "Running"); err == nil || !strings.Contains(err.Error(), "may not write NodeDiagnostic logs-b of node diag-b") {
		t.Errorf("A writing the status of node B's NodeDiagnostic: %v, want a refusal", err)
	}
	u := Must[*unstructured.Unstructured](t)(a.dyn.Resource(ndiagResource).Get(ctx, "logs-a", metav1.GetOptions{}))
	_ = unstructured.SetNestedField(u.Object, "diag-b", "spec", "nodeName")
	if _, err := a.dyn.Resource(ndiagResource).Update(ctx, u, metav1.UpdateOptions{}); err == nil {
		t.Error("A updated the spec of a NodeDiagnostic")
	}
	if err := a.dyn.Resource(ndiagResource).Delete(ctx, "logs-b", metav1.DeleteOptions{}); err == nil {
		t.Error("A deleted a NodeDiagnostic")
	}

	// The systemd agent: node A's kubelet credentials (user system:node:diag-a
	// in group system:nodes), impersonated here since envtest has no kubelet.
	kubelet := rest.CopyConfig(env.Config)
	kubelet.Impersonate = rest.ImpersonationConfig{UserName: "system:node:diag-a", Groups: []string{"system:nodes", "system:authenticated"}}
	kdyn := Must[*dynamic.DynamicClient](t)(dynamic.NewForConfig(kubelet))
	if err := writeStatus(ctx, kdyn, "logs-a", "Completed"); err != nil {
		t.Errorf("node A's kubelet identity writing its own NodeDiagnostic: %v", err)
	}
	if err := writeStatus(ctx, kdyn, "logs-b", "Completed"); err == nil || !strings.Contains(err.Error(), "may not write NodeDiagnostic logs-b") {
		t.Errorf("node A's kubelet identity writing node B's NodeDiagnostic: %v, want a refusal", err)
	}
}
