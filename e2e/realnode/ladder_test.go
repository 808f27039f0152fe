//go:build e2enode

package realnode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/realnode"
)

// testLadderEscalates runs the ladder on the live node, which no engine
// owns: a fault, the taint and drain, exactly one reboot order carried out
// by the test hook (the machine does not reboot, so the kubelet's boot ID
// stays), and after the rung's timeout the next rung, Quarantine. Then the
// fault is lifted and a person releases the node, so that later steps find
// it in service.
func testLadderEscalates(t *testing.T, n *node) {
	ctx := context.Background()
	if err := os.Remove(realnode.RebootHook); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boot := nd.Status.NodeInfo.BootID

	policy := `apiVersion: nodemend.dev/v1alpha1
kind: NodeRepairPolicy
metadata:
  name: e2e-real-node-ladder
spec:
  nodeSelector:
    matchLabels: {kubernetes.io/hostname: ` + n.layout.NodeName + `}
  weight: 100
  maxUnhealthy: "100%"
  rules:
  - {conditionType: NetworkingReady, status: "False", toleration: 10s}
  drain:
    mode: Evict
    deadline: 30s
  ladder:
  - {action: Reboot, attempts: 1, timeout: 1m}
  - action: Quarantine
  quarantine:
    healthyFor: "0s"
`
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(policy), &u.Object); err != nil {
		t.Fatal(err)
	}
	dyn := n.dynamic(t)
	if _, err := dyn.Resource(repairPolicyGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(repairPolicyGVR).Delete(context.Background(), "e2e-real-node-ladder", metav1.DeleteOptions{})
	})

	link := createTestLink(t)
	linkUp := false
	t.Cleanup(func() {
		if !linkUp {
			deleteTestLink()
		}
	})
	n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionTrue))
	time.Sleep(5 * time.Second)
	t0 := time.Now()
	if err := netlink.LinkSetDown(link); err != nil {
		t.Fatal(err)
	}
	n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionFalse))

	// One order, carried out by the hook; then Quarantine once the rung's
	// timeout has passed without a new boot ID.
	var hookRan, quarantined time.Time
	deadline := time.Now().Add(4 * time.Minute)
	for quarantined.IsZero() {
		if _, err := os.Stat(realnode.RebootHook); err == nil && hookRan.IsZero() {
			hookRan = time.Now()
		}
		nd, err = n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if record.PhaseOf(nd) == record.PhaseQuarantined {
			quarantined = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no quarantine in 4m (hook ran: %v); node annotations %v; %s", !hookRan.IsZero(), nd.Annotations, n.ladderState(ctx, t))
		}
		time.Sleep(250 * time.Millisecond)
	}
	orders := n.ordersFor(ctx, t)
	if len(orders) != 1 || orders[0] != "Reboot" {
		t.Errorf("orders for the node: %v, want exactly one Reboot", orders)
	}
	if hookRan.IsZero() {
		t.Errorf("the reboot hook never ran; %s", n.ladderState(ctx, t))
	}
	if nd.Status.NodeInfo.BootID != boot {
		t.Errorf("the Node's boot ID changed (%q, was %q): the machine rebooted", nd.Status.NodeInfo.BootID, boot)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err != nil || strings.TrimSpace(string(b)) != boot {
		t.Errorf("the machine's boot changed (%q, was %q): %v", b, boot, err)
	}
	if !nd.Spec.Unschedulable {
		t.Error("the quarantined node is not cordoned")
	}
	// The timeout is counted from the order, which follows the drain
	// deadline: the escalation comes no sooner than the timeout after the
	// hook ran.
	if !hookRan.IsZero() && quarantined.Sub(hookRan) < 50*time.Second {
		t.Errorf("quarantined %s after the hook ran, before the rung's 1m timeout", quarantined.Sub(hookRan).Round(time.Second))
	}
	t.Logf("FIGURE ladder: fault → hook ran %s, → quarantined %s", hookRan.Sub(t0).Round(100*time.Millisecond), quarantined.Sub(t0).Round(100*time.Millisecond))

	// The fault lifted, a person releases the node.
	deleteTestLink()
	linkUp = true
	n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionTrue))
	patch := []byte(`{"metadata":{"annotations":{"nodemend.dev/release":"e2e"}}}`)
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, n.layout.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		nd, err = n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tainted := false
		for _, tn := range nd.Spec.Taints {
			tainted = tainted || strings.HasPrefix(tn.Key, "nodemend.dev/")
		}
		if !tainted && !nd.Spec.Unschedulable && !record.InRepair(nd) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not back in service 1m after the release: taints %v, unschedulable %v, annotations %v", nd.Spec.Taints, nd.Spec.Unschedulable, nd.Annotations)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ordersFor lists the actions of the NodeRemediations for the node.
func (n *node) ordersFor(ctx context.Context, t *testing.T) []string {
	t.Helper()
	list, err := n.dynamic(t).Resource(remediationGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range list.Items {
		node, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName")
		action, _, _ := unstructured.NestedString(o.Object, "spec", "action")
		if node == n.layout.NodeName && o.GetName() != "e2e-reboot-hook" {
			out = append(out, action)
		}
	}
	return out
}

// ladderState describes the node's orders (spec and status) and the events
// about it, for a failure message.
func (n *node) ladderState(ctx context.Context, t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if list, err := n.dynamic(t).Resource(remediationGVR).List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range list.Items {
			spec, _, _ := unstructured.NestedMap(o.Object, "spec")
			status, _, _ := unstructured.NestedMap(o.Object, "status")
			fmt.Fprintf(&b, "order %s: spec %v, status %v; ", o.GetName(), spec, status)
		}
	}
	if evs, err := n.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + n.layout.NodeName}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s %s: %s; ", e.Source.Component, e.Reason, e.Message)
		}
	}
	return b.String()
}
