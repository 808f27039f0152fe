package deploytest

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nodemend.dev/nodemend/pkg/health"
)

// The status lane: besides the node and the types (admission_test.go),
// what an agent writes into nodemend's conditions is bounded — each type
// at most once, a status of True, False or Unknown, a reason and a message
// within pkg/health's bounds — whatever the patch type (strategic merge,
// JSON merge, JSON patch) or the subresource write (update).
func TestAgentStatusWritesStayInBounds(t *testing.T) {
	ctx := t.Context()
	a := agentOn(t, "lane-a")
	agentOn(t, "lane-b")
	waitForPolicy(t, a, "lane-b")

	patch := func(pt types.PatchType, body string) error {
		_, err := a.core.CoreV1().Nodes().Patch(ctx, "lane-a", pt, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	cond := func(typ, status, reason, msg string) string {
		return fmt.Sprintf(`{"type":%q,"status":%q,"reason":%q,"message":%q,"lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}`,
			typ, status, reason, msg)
	}
	refused, allowed := verdicts(t)

	// 5,000 copies of KernelReady appended with a JSON patch (the review's
	// node bloat), or two in one strategic merge patch.
	var ops []string
	for i := 0; i < 5000; i++ {
		ops = append(ops, `{"op":"add","path":"/status/conditions/-","value":`+cond("KernelReady", "False", "KernelDeadlock", "dup")+`}`)
	}
	refused("5000 duplicate KernelReady (JSON patch)", patch(types.JSONPatchType, "["+strings.Join(ops, ",")+"]"), "at most once")
	refused("one duplicate KernelReady (JSON patch)", patch(types.JSONPatchType, "["+ops[0]+"]"), "at most once")
	refused("a status outside True/False/Unknown", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "Maybe", "KernelDeadlock", "m")+`]}}`), "must be True, False or Unknown")
	refused("an empty reason", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "False", "", "m")+`]}}`), "UpperCamelCase")
	refused("a reason that is not a reason", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "False", "kernel deadlock; see <a href>", "m")+`]}}`), "UpperCamelCase")
	refused("a 129-character reason", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "False", "K"+strings.Repeat("x", health.MaxReasonLength), "m")+`]}}`), "at most 128 characters")
	refused("a 1 MiB message", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("StorageReady", "False", "DiskReadOnly", strings.Repeat("x", 1<<20))+`]}}`), "at most 1024 characters")
	refused("a 1025-character message", patch(types.MergePatchType, mergeConditions(t, a, cond("StorageReady", "False", "DiskReadOnly", strings.Repeat("x", health.MaxMessageLength+1)))),
		"at most 1024 characters")

	allowed("a 128-character reason", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "False", "K"+strings.Repeat("x", health.MaxReasonLength-1), "m")+`]}}`))
	allowed("1024 characters of 3 bytes each", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("StorageReady", "False", "DiskReadOnly", strings.Repeat("日", health.MaxMessageLength))+`]}}`))
	allowed("Unknown", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("NetworkingReady", "Unknown", "NetworkingIsReady", "m")+`]}}`))
	// The agent's own write of a fault with a huge message, bounded by the
	// exporter's health.BoundMessage, passes.
	allowed("the exporter's bound message", patch(types.StrategicMergePatchType,
		`{"status":{"conditions":[`+cond("KernelReady", "False", health.ReasonForkFailedOutOfPIDs, health.BoundMessage(strings.Repeat("fork failed ", 1<<16)))+`]}}`))

	// The node holds each nodemend type once, and the kubelet's conditions.
	n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, "lane-a", metav1.GetOptions{}))
	seen := map[string]int{}
	for _, c := range n.Status.Conditions {
		seen[string(c.Type)]++
	}
	for typ, k := range seen {
		if k != 1 {
			t.Errorf("node lane-a has %d %s conditions", k, typ)
		}
	}
	if seen["Ready"] != 1 || seen["MemoryPressure"] != 1 {
		t.Errorf("the kubelet's conditions changed: %v", seen)
	}
}

// mergeConditions is a JSON merge patch body that replaces the node's
// conditions with its current ones plus c (a merge patch replaces lists).
func mergeConditions(t *testing.T, a agentIdentity, c string) string {
	t.Helper()
	n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(t.Context(), a.node, metav1.GetOptions{}))
	var parts []string
	for _, cur := range n.Status.Conditions {
		if cur.Type == "StorageReady" {
			continue
		}
		parts = append(parts, string(mustJSON(cur)))
	}
	parts = append(parts, c)
	return `{"status":{"conditions":[` + strings.Join(parts, ",") + `]}}`
}

// The policy states pkg/health's bounds.
func TestAdmissionPolicyStatesTheHealthBounds(t *testing.T) {
	p := Find(installed, "ValidatingAdmissionPolicy", "nodemend-agent-node-status")
	if p == nil {
		t.Fatal("no policy rendered")
	}
	vals, _, _ := unstructured.NestedSlice(p.Object, "spec", "validations")
	var all []string
	for _, v := range vals {
		all = append(all, v.(map[string]any)["expression"].(string))
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		fmt.Sprintf("size(c.?reason.orValue('')) <= %d", health.MaxReasonLength),
		fmt.Sprintf("matches('%s')", health.ReasonPattern),
		fmt.Sprintf("size(c.?message.orValue('')) <= %d", health.MaxMessageLength),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the policy does not state %q", want)
		}
	}
}
