package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/repair/workflow"
)

func TestRelease(t *testing.T) {
	kc := kubeconfig(t, cfg)
	mk := func(name, phase string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		if phase != "" {
			n.Annotations[workflow.PhaseAnnotation] = phase
		}
		if _, err := core.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}) })
	}
	mk("rel-q", string(workflow.PhaseQuarantined))
	mk("rel-d", string(workflow.PhaseDraining))
	mk("rel-h", "")

	out, err := run(t, "--kubeconfig", kc, "release", "rel-q", "--reason", "GPU reseated")
	if err != nil || !strings.Contains(out, "release requested") {
		t.Fatalf("release: %v\n%s", err, out)
	}
	n, err := core.CoreV1().Nodes().Get(t.Context(), "rel-q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := n.Annotations[workflow.ReleaseAnnotation]; !strings.HasPrefix(v, "GPU reseated (") {
		t.Errorf("release annotation %q", v)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-d"); err == nil || !strings.Contains(err.Error(), "not quarantined (repair phase Draining)") {
		t.Errorf("releasing a draining node: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-h"); err == nil || !strings.Contains(err.Error(), "no repair in progress") {
		t.Errorf("releasing a healthy node: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "release", "rel-none"); err == nil {
		t.Error("releasing a node that does not exist succeeded")
	}
}
