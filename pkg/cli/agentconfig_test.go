package cli

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// status judges policies against the agents' quiet periods as the
// controller does: a policy an agent's override defeats shows as ignored,
// naming the override and where it is set.
func TestStatusJudgesPoliciesAgainstTheAgentsConfig(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nodemend-agent-config"},
		Data: map[string]string{"agent.yaml": "reasons:\n  NvidiaXIDError:\n    quietPeriod: 5m\n"}}
	if _, err := core.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.CoreV1().ConfigMaps("default").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	pols := dynamic.NewForConfigOrDie(cfg).Resource(nodeRepairPolicyGVR)
	pol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRepairPolicy", "metadata": map[string]any{"name": "cli-quiet"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"cli-quiet": "none"}},
			"rules":        []any{map[string]any{"conditionType": "AcceleratedHardwareReady", "status": "False", "toleration": "10m"}},
		},
	}}
	if _, err := pols.Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pols.Delete(context.Background(), "cli-quiet", metav1.DeleteOptions{}) })

	kc := kubeconfig(t, cfg)
	out, err := run(t, "--kubeconfig", kc, "status", "-l", "cli-quiet=none", "--controller-namespace", "default")
	want := "NodeRepairPolicy cli-quiet is ignored by the controller: rule on AcceleratedHardwareReady=False: toleration 10m0s is not shorter than " +
		"the quiet period 5m0s the agents' configuration (reasons.NvidiaXIDError.quietPeriod in ConfigMap default/nodemend-agent-config)"
	if err != nil || !strings.Contains(out, want) {
		t.Errorf("status: %v; want it to say %q", err, want)
	}
	// Another name, not there: unknown, as for the controller; the
	// registry's quiet periods admit the policy.
	out, err = run(t, "--kubeconfig", kc, "status", "-l", "cli-quiet=none", "--controller-namespace", "default", "--agent-config", "elsewhere")
	if err != nil || strings.Contains(out, "cli-quiet is ignored") {
		t.Errorf("status --agent-config elsewhere: %v; the policy is refused", err)
	}
}
