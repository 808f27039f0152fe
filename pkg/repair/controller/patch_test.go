package controller_test

import (
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
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
	p, err := controller.NodePatch(old, tainted, true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p.Data(tainted)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`; string(data) != want || p.Type() != types.StrategicMergePatchType {
		t.Errorf("repair write: %s %s, want %s %s", p.Type(), data, types.StrategicMergePatchType, want)
	}
	other := tainted.DeepCopy()
	other.Spec.ProviderID = "b"
	p, err = controller.NodePatch(old, other, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Data(other)
	if err != nil {
		t.Fatal(err)
	}
	if p.Type() != types.MergePatchType {
		t.Errorf("other write: %s, want a JSON merge patch", p.Type())
	}
	want, err := client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}).Data(other)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("other write: %s, want the whole diff %s", got, want)
	}
}

// TestManagerAsksForNoCompression: the API server gzips each watch stream
// for each client that accepts it; the controller's clients do not ask, and
// the caller's config is left as it was.
func TestManagerAsksForNoCompression(t *testing.T) {
	cfg := rest.CopyConfig(restCfg)
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{
		Logger: logr.Discard(), Namespace: "x", PauseConfigMap: "p", MetricsAddr: "0", HealthAddr: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !mgr.GetConfig().DisableCompression {
		t.Error("the manager's clients accept gzip")
	}
	if cfg.DisableCompression {
		t.Error("NewManager changed the caller's config")
	}
}
