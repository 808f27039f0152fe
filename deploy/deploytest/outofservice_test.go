package deploytest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The out-of-service taint (non-graceful node shutdown) makes the
// controller-manager force-delete a node's pods and detach its volumes, so
// nodemend-controller-nodes admits it only on a Node under repair whose
// kubelet is gone (Ready Unknown, the node lifecycle controller's verdict),
// and takes it off only while the kubelet is Ready again. As for every
// guard (the bypass class): the controller first writes everything it may —
// its repair record, its taint where the fault is real — then tries the
// write the rule forbids.
func TestOutOfServiceTaintNeedsTheKubeletGone(t *testing.T) {
	waitForTargetsPolicy(t)
	c := controllerActor(t)
	refused, allowed := verdicts(t)
	const (
		on  = `[{"op":"add","path":"/spec/taints/-","value":{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}}]`
		put = "puts node.kubernetes.io/out-of-service only on a Node under repair whose kubelet is gone"
		off = "takes node.kubernetes.io/out-of-service off only a Node whose kubelet is Ready"
	)
	taint := func(f *fixture) error {
		_, err := c.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.JSONPatchType, []byte(on), metav1.PatchOptions{})
		return err
	}
	untaint := func(f *fixture) error {
		n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(t.Context(), f.node, metav1.GetOptions{}))
		var keep []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != "node.kubernetes.io/out-of-service" {
				keep = append(keep, tn)
			}
		}
		body := mustJSON(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion}, "spec": map[string]any{"taints": keep}})
		_, err := c.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	// underRepair: the agent's fault on the status, then everything the
	// controller may write: its record and its repair taint.
	underRepair := func(f *fixture) {
		setKernelReady(t, f.node, corev1.ConditionFalse)
		prepare(t, c, f)
		settle(t, f, "")
	}

	t.Run("on a healthy node, after writing every record it may", func(t *testing.T) {
		f := newFixture(t, "oos-healthy", false)
		prepare(t, c, f)
		refused("the out-of-service taint", taint(f), put)
	})
	t.Run("on a node under repair whose kubelet is Ready", func(t *testing.T) {
		f := newFixture(t, "oos-alive", false)
		underRepair(f)
		refused("the out-of-service taint", taint(f), put)
	})
	t.Run("dead and under repair: on; off only once the kubelet is back", func(t *testing.T) {
		f := newFixture(t, "oos-dead", false)
		underRepair(f)
		setReady(t, f.node, corev1.ConditionUnknown)
		allowed("the out-of-service taint", taint(f))
		refused("taking it off while the kubelet is gone", untaint(f), off)
		setReady(t, f.node, corev1.ConditionTrue)
		allowed("taking it off once the kubelet is Ready", untaint(f))
	})
}

// setReady sets the kubelet's Ready condition, as the kubelet (True) or
// the node lifecycle controller (Unknown) would.
func setReady(t *testing.T, node string, status corev1.ConditionStatus) {
	t.Helper()
	body := mustJSON(map[string]any{"status": map[string]any{"conditions": []map[string]any{condition("Ready", string(status), "KubeletReady")}}})
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"))
}
