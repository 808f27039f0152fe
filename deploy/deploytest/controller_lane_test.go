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
// taint, its quarantine's cordon) and nothing else on a Node; another
// component's labels, annotations or taints, a person's acts and the rest of
// the spec are refused, whatever the patch. Its destructive acts need the
// evidence of the Node's status, which the test (as the kubelet and agent
// would) writes: taint, cordon and delete only while a repair condition is
// unhealthy, lift the cordon only once none is.
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
	setKernelReady(t, node.Name, corev1.ConditionTrue)

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

	allowed("its repair record", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/repair-state":"{\"version\":1}"}}}`))
	// The API server adds node.kubernetes.io/not-ready on create
	// (TaintNodesByCondition): the node carries two foreign taints.
	foreign := len(Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})).Spec.Taints)
	addTaint := `[{"op":"add","path":"/spec/taints/-","value":{"key":"nodemend.dev/repair","effect":"NoSchedule"}}]`
	refused("its taint on a healthy node", patch(types.JSONPatchType, addTaint), "taints a Node for repair only while its status shows a repair condition unhealthy")
	refused("deleting a node not under repair", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}), "deletes only a Node under repair")

	refused("a label", patch(types.MergePatchType, `{"metadata":{"labels":{"karpenter.sh/nodepool":null}}}`), "may not change a Node's labels")
	refused("another component's annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/owner":"me"}}}`),
		"may only write nodemend.dev/ annotations")
	refused("removing another component's annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/owner":null}}}`),
		"may only write nodemend.dev/ annotations")
	refused("a new foreign annotation", patch(types.MergePatchType, `{"metadata":{"annotations":{"example.com/new":"x"}}}`),
		"may only write nodemend.dev/ annotations")
	refused("lifting the person's veto", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/do-not-repair":null}}}`),
		"may not set, change or remove nodemend.dev/do-not-repair | needs the permission veto")
	refused("releasing the node", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/release":"me"}}}`),
		"may only remove nodemend.dev/release and nodemend.dev/repair-now | needs the permission release")
	refused("asking for its repair", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/repair-now":"me"}}}`),
		"may only remove nodemend.dev/release and nodemend.dev/repair-now | needs the permission repair")
	refused("removing another component's taint", patch(types.StrategicMergePatchType,
		`{"spec":{"taints":[{"key":"nodemend.dev/repair","effect":"NoSchedule"}]}}`), "may only add or remove its own taint")
	refused("adding another component's taint", patch(types.JSONPatchType,
		`[{"op":"add","path":"/spec/taints/-","value":{"key":"node.kubernetes.io/unreachable","effect":"NoExecute"}}]`), "may only add or remove its own taint")
	refused("cordoning a node it does not repair", patch(types.MergePatchType, `{"spec":{"unschedulable":true}}`), "cordons only a Node it is repairing")
	refused("an owner", patch(types.MergePatchType,
		`{"metadata":{"ownerReferences":[{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"x","uid":"d6f5c1d2-0000-4000-8000-000000000001"}]}}`), "owners")
	refused("a finalizer", patch(types.MergePatchType, `{"metadata":{"finalizers":["example.com/hold"]}}`), "finalizers")

	got := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}))
	if got.Annotations["example.com/owner"] != "team-a" || got.Annotations["nodemend.dev/do-not-repair"] != "investigating" ||
		got.Labels["karpenter.sh/nodepool"] != "default" || got.Spec.Unschedulable || len(got.Spec.Taints) != foreign ||
		got.Annotations["nodemend.dev/release"] != "" {
		t.Errorf("the node after the refused writes: %+v %+v", got.ObjectMeta, got.Spec)
	}

	// The kubelet or agent reports the fault: the evidence.
	setKernelReady(t, node.Name, corev1.ConditionFalse)
	allowed("its taint on an unhealthy node", patch(types.JSONPatchType, addTaint))
	refused("recording a cordon it does not make", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/repair-state":"{\"version\":1,\"cordoned\":true}"}}}`),
		"records a cordon as its own only in the request that cordons the Node")
	allowed("a quarantine's cordon, recorded", patch(types.MergePatchType,
		`{"metadata":{"annotations":{"nodemend.dev/repair-state":"{\"version\":1,\"cordoned\":true}"}},"spec":{"unschedulable":true}}`))
	refused("lifting its cordon while the fault is reported", patch(types.MergePatchType, `{"spec":{"unschedulable":false}}`),
		"still shows one unhealthy")
	setKernelReady(t, node.Name, corev1.ConditionTrue)
	allowed("lifting its cordon once healthy", patch(types.MergePatchType,
		`{"metadata":{"annotations":{"nodemend.dev/repair-state":"{\"version\":1}"}},"spec":{"unschedulable":false}}`))
	refused("cordoning a healthy node", patch(types.MergePatchType, `{"spec":{"unschedulable":true}}`), "cordons only a Node it is repairing")
	// A person's cordon is never nodemend's to lift, whatever it records.
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}))
	refused("claiming a person's cordon", patch(types.MergePatchType, `{"metadata":{"annotations":{"nodemend.dev/cordoned":"true"}}}`),
		"was cordoned already")
	refused("lifting a person's cordon", patch(types.MergePatchType, `{"spec":{"unschedulable":false}}`), "is not cordoned by nodemend")
	refused("deleting a healthy node under repair", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}),
		"deletes a Node only while its status shows a repair condition unhealthy")
	setKernelReady(t, node.Name, corev1.ConditionFalse)
	refused("deleting a node its record does not name", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}),
		"deletes only the object its repair record names")
	allowed("handing it over", patch(types.MergePatchType, string(mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"nodemend.dev/repair-state": fmt.Sprintf(`{"version":1,"phase":"Terminating","target":{"kind":"Node","name":%q,"uid":%q}}`, node.Name, node.UID)}}}))))
	allowed("deleting an unhealthy node under repair, handed over", c.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}))
}

// setKernelReady writes node's KernelReady condition as its agent would
// (here with the admin's credentials: the evidence is not the controller's
// to write).
func setKernelReady(t *testing.T, node string, status corev1.ConditionStatus) {
	t.Helper()
	reason := "KernelIsReady"
	if status != corev1.ConditionTrue {
		reason = "KernelDeadlock"
	}
	body := mustJSON(map[string]any{"status": map[string]any{"conditions": []map[string]any{condition("KernelReady", string(status), reason)}}})
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"))
}
