package deploytest

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

var nodeRepairPolicies = v1alpha1.GroupVersion.WithResource("noderepairpolicies")

// repairPolicy is a NodeRepairPolicy with one rule on condition=status.
func repairPolicy(name, condition, status, toleration string, reasons ...string) *unstructured.Unstructured {
	rule := map[string]any{"conditionType": condition, "status": status, "toleration": toleration}
	if len(reasons) > 0 {
		rs := make([]any, len(reasons))
		for i, r := range reasons {
			rs[i] = r
		}
		rule["reasons"] = rs
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRepairPolicy",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"rules": []any{rule}},
	}}
}

// The chart's nodemend-repair-policy-fires refuses, at apply time and for
// anyone, a NodeRepairPolicy whose toleration for a condition is not
// shorter than the quiet period of a log-derived reason it acts on, naming
// the condition, the toleration, the reason and the quiet period with
// where it is set: the registry's, or the agents' own override from the
// chart's values (all-features.yaml shortens the NvidiaXIDError family's
// to 20m). Policies that can fire are admitted, and where the agents use
// the registry's quiet periods the controller's own check agrees.
func TestAdmissionRefusesAPolicyThatCanNeverFire(t *testing.T) {
	ctx := t.Context()
	api := dyn.Resource(nodeRepairPolicies)
	// The policy is active once a dry run of a policy that can never fire
	// is refused.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := api.Create(ctx, repairPolicy("fires-probe", "KernelReady", "False", "2h"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "can never repair a fault"), nil
	})
	if err != nil {
		t.Fatalf("nodemend-repair-policy-fires never refused a policy: %v", err)
	}

	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		// want: the message of the refusal; empty: admitted.
		want string
		// registryOnly: no override of the chart's values applies, so the
		// controller (which judges by the registry) must agree.
		registryOnly bool
	}{
		{name: "KernelReady at the registry's quiet period", obj: repairPolicy("fires-kernel", "KernelReady", "False", "45m"), registryOnly: true,
			want: "NodeRepairPolicy fires-kernel can never repair a fault: rule on KernelReady=False: toleration 45m is not shorter than the quiet period 45m0s (the registry's) of ForkFailedOutOfPIDs, a log-derived reason it acts on"},
		{name: "KernelReady below it", obj: repairPolicy("fires-kernel-short", "KernelReady", "False", "44m59s"), registryOnly: true},
		{name: "KernelReady limited to a reason checked, not logged", obj: repairPolicy("fires-kernel-deadlock", "KernelReady", "False", "2h", "KernelDeadlock"), registryOnly: true},
		{name: "the agents' shorter XID quiet period", obj: repairPolicy("fires-gpu", "AcceleratedHardwareReady", "False", "20m"),
			want: "rule on AcceleratedHardwareReady=False: toleration 20m is not shorter than the quiet period 20m (set by agent.config.reasons.NvidiaXIDError) of NvidiaXID109Error"},
		{name: "a rule naming the family", obj: repairPolicy("fires-gpu-family", "AcceleratedHardwareReady", "False", "30m", "NvidiaXIDError"),
			want: "toleration 30m is not shorter than the quiet period 20m (set by agent.config.reasons.NvidiaXIDError) of NvidiaXID109Error"},
		{name: "a rule naming one XID", obj: repairPolicy("fires-gpu-xid", "AcceleratedHardwareReady", "False", "25m", "NvidiaXID79Error"),
			want: "of NvidiaXID79Error, a log-derived reason it acts on"},
		{name: "below the agents' quiet period", obj: repairPolicy("fires-gpu-short", "AcceleratedHardwareReady", "False", "19m")},
		{name: "a rule on reasons the override leaves", obj: repairPolicy("fires-gpu-amd", "AcceleratedHardwareReady", "False", "30m", "AMDGPUHardwareError", "NvidiaXIDWarning"), registryOnly: true},
		{name: "Ready Unknown: no quiet period", obj: repairPolicy("fires-ready", "Ready", "Unknown", "2h"), registryOnly: true},
		{name: "StorageReady True is not a fault the agent clears", obj: repairPolicy("fires-storage-true", "StorageReady", "True", "2h"), registryOnly: true},
	} {
		_, err := api.Create(ctx, tc.obj, metav1.CreateOptions{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: admitted, want refused with %q", tc.name, tc.want)
		case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want Invalid with %q", tc.name, err, tc.want)
		}
		if err == nil {
			name := tc.obj.GetName()
			t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		if tc.registryOnly {
			var typed v1alpha1.NodeRepairPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tc.obj.Object, &typed); err != nil {
				t.Fatal(err)
			}
			_, _, cerr := policy.FromAPI(&typed)
			if (cerr != nil) != (tc.want != "") {
				t.Errorf("%s: the controller's check says %v, admission %v", tc.name, cerr, err)
			}
		}
	}

	// An update that makes an admitted policy one that can never fire is
	// refused too.
	p, err := api.Get(ctx, "fires-kernel-short", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules, _, _ := unstructured.NestedSlice(p.Object, "spec", "rules")
	rules[0].(map[string]any)["toleration"] = "1h"
	if err := unstructured.SetNestedSlice(p.Object, rules, "spec", "rules"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Update(ctx, p, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "toleration 1h is not shorter than the quiet period 45m0s") {
		t.Errorf("update to a toleration of 1h: %v, want refused", err)
	}
}
