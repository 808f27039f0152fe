package deploytest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The controller's node lane, with only its ServiceAccount's token: it
// writes its repair state (nodemend.dev/ annotations, the nodemend.dev/repair
// taint) and deletes a node only once it handed it over (phase
// Terminating); another component's labels, annotations or taints, the
// human's veto and the rest of the spec are refused, whatever the patch.
func TestControllerWritesOnlyItsRepairStateOnNodes(t *testing.T) {
	ctx := t.Context()
	c := controllerClient(t)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("ctl-lane"),
			Labels:      map[string]string{"kubernetes.io/hostname": "h", "karpenter.sh/nodepool": "default"},
			Annotations: map[string]string{"example.com/owner": "team-a", "nodemend.dev/do-not-repair": "investigating"}},
		Spec: corev1.NodeSpec{ProviderID: "kwok://n", Taints: []corev1.Taint{{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}}},
	}
	node = Must[*corev1.Node](t)(admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}))
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })

	patch := func(pt types.PatchType, body string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node.Name, pt, []byte(body), metav1.PatchOptions{})
		return err
	}
	refused, allowed := verdicts(t)
	// A new label value each try: a patch that changes nothing is admitted.
	try := 0
	waitFor(t, "the controller nodes policy", func(context.Context) bool {
		try++
		err := patch(types.MergePatchType, fmt.Sprintf(`{"metadata":{"labels":{"example.com/try":"%d"}}}`, try))
		return err != nil && strings.Contains(err.Error(), "may not change a Node's labels")
	})
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/try":null}}}`), metav1.PatchOptions{}))

	allowed("its phase annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/repair-phase":"Draining"}}}`))
	// The API server adds node.kubernetes.io/not-ready on create
	// (TaintNodesByCondition): the node carries two foreign taints.
	foreign := len(Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})).Spec.Taints)
	allowed("its taint", patch(types.JSONPatchType, `[{"op":"add","path":"/spec/taints/-","value":{"key":"nodemend.dev/repair","effect":"NoSchedule"}}]`))

	refused("a label", patch(types.MergePatchType, `{"metadata":{"labels":{"karpenter.sh/nodepool":null}}}`), "may not change a Node's labels")
	refused("another component's annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/owner":"me"}}}`),
		"may only write nodemend.dev/ annotations")
	refused("removing another component's annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/owner":null}}}`),
		"may only write nodemend.dev/ annotations")
	refused("a new foreign annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/new":"x"}}}`),
		"may only write nodemend.dev/ annotations")
	refused("lifting the human's veto", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/do-not-repair":null}}}`),
		"not nodemend.dev/do-not-repair")
	refused("removing another component's taint", patch(types.StrategicMergePatchType,
		`{"spec":{"taints":[{"key":"nodemend.dev/repair","effect":"NoSchedule"}]}}`), "may only add or remove its own taint")
	refused("adding another component's taint", patch(types.JSONPatchType,
		`[{"op":"add","path":"/spec/taints/-","value":{"key":"node.kubernetes.io/unreachable","effect":"NoExecute"}}]`), "may only add or remove its own taint")
	refused("cordoning without recording it", patch(types.MergePatchType, `{"spec":{"unschedulable":true}}`), "may cordon a Node only recording it")
	refused("an owner", patch(types.MergePatchType,
		`{"metadata":{"ownerReferences":[{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"x","uid":"d6f5c1d2-0000-4000-8000-000000000001"}]}}`), "owners")
	refused("a finalizer", patch(types.MergePatchType, `{"metadata":{"finalizers":["example.com/hold"]}}`), "finalizers")
	refused("deleting a node not handed over", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}),
		"deletes only nodes it drained and handed over")

	got := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}))
	if got.Annotations["example.com/owner"] != "team-a" || got.Annotations["nodemend.dev/do-not-repair"] != "investigating" ||
		got.Labels["karpenter.sh/nodepool"] != "default" || got.Spec.Unschedulable || len(got.Spec.Taints) != foreign+1 {
		t.Errorf("the node after the refused writes: %+v %+v", got.ObjectMeta, got.Spec)
	}

	allowed("a quarantine's cordon, recorded", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/cordoned":"true"}},"spec":{"unschedulable":true}}`))
	allowed("lifting its own cordon", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/cordoned":null}},"spec":{"unschedulable":false}}`))
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}))
	refused("lifting a human's cordon", patch(types.MergePatchType, `{"spec":{"unschedulable":false}}`), "uncordon only a Node it cordoned")
	allowed("handing over", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/repair-phase":"Terminating"}}}`))
	allowed("deleting the node handed over", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}))
}
