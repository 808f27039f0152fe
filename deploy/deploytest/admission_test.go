package deploytest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodemend.dev/nodemend/pkg/health"
)

// The chart's admission policy, with tokens bound to agent pods on two
// nodes: node A's agent writes nodemend's conditions of node A and nothing
// else — not node B, not the kubelet's conditions, not other fields.
func TestAgentMayPatchOnlyItsOwnNodesConditions(t *testing.T) {
	ctx := t.Context()
	a, b := agentOn(t, "node-a"), agentOn(t, "node-b")

	extra := Must[map[string][]string](t)(userExtra(ctx, a))
	if got := extra[nodeNameExtra]; len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("token of the agent pod on node-a carries %s=%v", nodeNameExtra, got)
	}
	waitForPolicy(t, a, "node-b")

	allowed := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	refused := func(name string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused", name)
			return
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want Forbidden", name, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a message with %q", name, err, want)
		}
	}

	allowed("A sets KernelReady=False on A", a.patchConditions(ctx, "node-a", condition("KernelReady", "False", "KernelDeadlock")))
	allowed("A adds AcceleratedHardwareReady on A", a.patchConditions(ctx, "node-a", condition("AcceleratedHardwareReady", "True", "NvidiaGPUIsReady")))
	allowed("A removes its AcceleratedHardwareReady from A", a.patchConditions(ctx, "node-a",
		map[string]any{"type": "AcceleratedHardwareReady", "$patch": "delete"}))
	allowed("B sets its own StorageReady", b.patchConditions(ctx, "node-b", condition("StorageReady", "True", "DiskIsReady")))

	refused("A writes KernelReady on B", a.patchConditions(ctx, "node-b", condition("KernelReady", "False", "KernelDeadlock")),
		"nodemend-agent on node node-a may not write the status of node node-b")
	refused("A sets the kubelet's Ready on A", a.patchConditions(ctx, "node-a", condition("Ready", "False", "KubeletNotReady")),
		"may only write nodemend's condition types")
	refused("A sets MemoryPressure on A", a.patchConditions(ctx, "node-a", condition("MemoryPressure", "True", "Oops")),
		"may only write nodemend's condition types")
	refused("A removes Ready from A", a.patchConditions(ctx, "node-a", map[string]any{"type": "Ready", "$patch": "delete"}),
		"may only write nodemend's condition types")
	refused("A adds a foreign condition type to A", a.patchConditions(ctx, "node-a", condition("FrobnicatorReady", "True", "Fine")),
		"may only write nodemend's condition types")
	refused("A changes A's capacity", a.patchStatus(ctx, "node-a", map[string]any{"status": map[string]any{"capacity": map[string]any{"pods": "500"}}}),
		"may change no Node status field but status.conditions")
	refused("A labels A through the status", a.patchStatus(ctx, "node-a", map[string]any{"metadata": map[string]any{"labels": map[string]any{"evil": "yes"}}}),
		"may not change a Node's metadata or spec")

	// What admission left behind: A's write is there, the kubelet's
	// conditions and B are untouched.
	nodeA := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}))
	conds := map[string]corev1.NodeCondition{}
	for _, c := range nodeA.Status.Conditions {
		conds[string(c.Type)] = c
	}
	if c := conds["KernelReady"]; c.Status != corev1.ConditionFalse || c.Reason != "KernelDeadlock" {
		t.Errorf("node-a KernelReady = %+v", c)
	}
	if c := conds["Ready"]; c.Status != corev1.ConditionTrue {
		t.Errorf("node-a Ready = %+v", c)
	}
	if _, ok := conds["AcceleratedHardwareReady"]; ok {
		t.Error("node-a still has AcceleratedHardwareReady after A removed it")
	}
	if nodeA.Labels["evil"] != "" {
		t.Error("node-a got the label")
	}
	nodeB := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}))
	for _, c := range nodeB.Status.Conditions {
		if c.Type == "KernelReady" && c.Status != corev1.ConditionTrue {
			t.Errorf("node-b KernelReady = %+v", c)
		}
	}
}

// A token of the agent's ServiceAccount that is not bound to a pod (no node
// in it) writes no node at all.
func TestAgentTokenWithoutANodeIsRefused(t *testing.T) {
	ctx := t.Context()
	agentOn(t, "node-c")
	tr := Must[*authTokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "nodemend-agent",
		&authTokenRequest{}, metav1.CreateOptions{}))
	unbound := identityFromToken(t, "node-c", tr.Status.Token)
	err := unbound.patchConditions(ctx, "node-c", condition("KernelReady", "True", "KernelIsReady"))
	if err == nil || !strings.Contains(err.Error(), "not bound to a node") {
		t.Errorf("unbound token patching node-c: %v, want a refusal", err)
	}
}

// The policy's list of nodemend condition types is pkg/health's.
func TestAdmissionPolicyListsNodemendsConditionTypes(t *testing.T) {
	p := Find(installed, "ValidatingAdmissionPolicy", "nodemend-agent-node-status")
	if p == nil {
		t.Fatal("no policy rendered")
	}
	vars, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables")
	var owned string
	for _, v := range vars {
		m := v.(map[string]any)
		if m["name"] == "owned" {
			owned = m["expression"].(string)
		}
	}
	want := []string{}
	for _, c := range health.ConditionTypes() {
		want = append(want, "'"+string(c)+"'")
	}
	if got := strings.TrimSpace(owned); got != "["+strings.Join(want, ", ")+"]" {
		t.Errorf("owned = %s, want [%s]", got, strings.Join(want, ", "))
	}
}

// waitForPolicy waits until the API server enforces the policy (its policy
// cache syncs shortly after the install): until a's write to another node
// is refused.
func waitForPolicy(t *testing.T, a agentIdentity, other string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := a.patchConditions(ctx, other, condition("KernelReady", "True", "KernelIsReady"))
		return err != nil && strings.Contains(err.Error(), "may not write the status"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy never refused %s writing %s: %v", a.node, other, err)
	}
}
