//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/pkg/cli"
	"nodemend.dev/nodemend/sim"
)

// A node no engine owns, faulted, is tainted, drained and rebooted once by
// its own agent (the simulated host's reboot: a new boot ID, an empty
// kernel log, the agent restarted), verified by the boot ID the kubelet
// reports, and returned to service once healthy.
func TestRebootRungOnANodeNoEngineOwns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "e2e-ladder-plain"
	host, firstBoot := plainNode(ctx, t, node, "e2e-ladder", kernelCondition, nil, `
  ladder:
  - {action: Reboot, attempts: 1, timeout: 1m}
  - action: Quarantine`)

	// The node keeps running out of PIDs until it is rebooted, as a leak
	// would make it.
	tainted := watchTaint(ctx, t, node)
	faulting, stopFault := context.WithCancel(ctx)
	defer stopFault()
	go func() {
		for faulting.Err() == nil && host.Reboots() == 0 {
			_, _ = host.Kmsg("cgroup: fork rejected by pids controller in /system.slice/kubelet.service")
			time.Sleep(time.Second)
		}
	}()
	t0 := time.Now()
	waitReboot(ctx, t, host)
	rebooted := time.Since(t0)
	taintedAt, seen := tainted()
	if !seen {
		t.Fatal("rebooted without being tainted for repair first")
	}
	stopFault()

	back := waitNode(ctx, t, node, "back in service: untainted, schedulable, KernelReady", func(n *corev1.Node) bool {
		return !hasTaint(n, "nodemend.dev/repair") && !n.Spec.Unschedulable && conditionIs(n, "KernelReady", corev1.ConditionTrue)
	})
	if host.Reboots() != 1 {
		t.Errorf("rebooted %d times, want once", host.Reboots())
	}
	if got := back.Status.NodeInfo.BootID; got == firstBoot || got != host.BootID() {
		t.Errorf("boot ID %q after the reboot (first boot %q, host now %q)", got, firstBoot, host.BootID())
	}
	if orders := ordersFor(ctx, t, node); orders != "Reboot" {
		t.Errorf("orders for the node: %q, want exactly one Reboot", orders)
	}
	for _, reason := range []string{"NodeRemediationOrdered", "NodeRebootVerified", "NodeReturnedToService"} {
		if got := eventCount(ctx, t, node, reason, 1); got != 1 {
			t.Errorf("%d %s events, want 1", got, reason)
		}
	}
	if got := eventCount(ctx, t, node, "NodeRepairFailed", 0); got != 0 {
		t.Errorf("%d NodeRepairFailed events, want none", got)
	}
	// What a person sees: the rung and its verification on the timeline.
	timelineShows(ctx, t, node, "Reboot (rung 1 of 2, attempt 1 of 1)", "NodeRebootVerified", "NodeReturnedToService")
	t.Logf("FIGURE reboot rung: fault → taint %s, → rebooted %s, → back in service %s",
		taintedAt.Sub(t0).Round(100*time.Millisecond), rebooted.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
}

// policyLabel is the node label that a test's own policy named policy
// selects.
func policyLabel(policy string) string { return "e2e.nodemend.dev/" + policy }

// ownPolicy is a NodeRepairPolicy named policy for the nodes labelled
// policyLabel(policy), weighted over the defaults, with spec (its YAML
// lines, indented two spaces) after the selector. Its nodes are a pool of
// their own, which the gate would hold at one sick node of one: its
// maxUnhealthy is 100%.
func ownPolicy(policy, spec string) string {
	return `apiVersion: nodemend.dev/v1alpha1
kind: NodeRepairPolicy
metadata:
  name: ` + policy + `
spec:
  nodeSelector:
    matchLabels: {` + policyLabel(policy) + `: "true"}
  weight: 100
  maxUnhealthy: "100%"
` + spec
}

// plainNode creates a node no engine owns, with labels, under a policy of
// its own named policy that repairs condition False after 5 s with ladder
// (YAML lines of the policy's spec; none: the default ladder). It returns
// the node's simulated host once the node is Ready and condition True, and
// the boot ID it reports.
func plainNode(ctx context.Context, t *testing.T, node, policy string, condition corev1.NodeConditionType, labels map[string]string, ladder string) (*sim.Host, string) {
	t.Helper()
	label := policyLabel(policy)
	if err := cluster.Apply(ctx, ownPolicy(policy, `  rules:
  - {conditionType: `+string(condition)+`, status: "False", toleration: 5s}
  drain:
    mode: Evict
    deadline: 30s`+ladder+`
`)); err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        node,
		Annotations: map[string]string{sim.KwokAnnotation: "fake"},
		// A zone and a pool of the test's own.
		Labels: map[string]string{label: "true", "kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
			corev1.LabelTopologyZone: policy, plainPool: policy},
	}}
	for k, v := range labels {
		n.Labels[k] = v
	}
	if _, err := cluster.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cluster.Client.CoreV1().Nodes().Delete(bg, node, metav1.DeleteOptions{})
		_ = cluster.Dynamic.Resource(sim.NodeRepairPolicyG).Delete(bg, policy, metav1.DeleteOptions{})
	})
	host, err := cluster.Host(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	boot := host.BootID()
	waitNode(ctx, t, node, "Ready and reporting its boot ID", func(n *corev1.Node) bool {
		return n.Status.NodeInfo.BootID == boot && conditionIs(n, "Ready", corev1.ConditionTrue) && conditionIs(n, string(condition), corev1.ConditionTrue)
	})
	return host, boot
}

// waitReboot waits up to 3 minutes for host's first reboot.
func waitReboot(ctx context.Context, t *testing.T, host *sim.Host) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for host.Reboots() == 0 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("node %s not rebooted within 3m of its fault; orders: %s", host.Node, ordersFor(ctx, t, host.Node))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watchTaint records, from now on, when node first carries the repair
// taint: a fast rung (a GPU reset) can taint and untaint a node between two
// polls of waitNode. The result reports that time, and whether it came.
func watchTaint(ctx context.Context, t *testing.T, node string) func() (time.Time, bool) {
	t.Helper()
	w, err := cluster.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	var at time.Time
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && hasTaint(n, "nodemend.dev/repair") {
				mu.Lock()
				if at.IsZero() {
					at = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	return func() (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		return at, !at.IsZero()
	}
}

// timelineShows checks that kubectl mend timeline NODE shows each of want.
func timelineShows(ctx context.Context, t *testing.T, node string, want ...string) {
	t.Helper()
	var out bytes.Buffer
	mend := cli.NewRootCommand(cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	mend.SetArgs([]string{"--kubeconfig", cluster.Kubeconfig, "timeline", node})
	if err := mend.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl mend timeline %s: %v\n%s", node, err, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("kubectl mend timeline %s does not show %q:\n%s", node, w, out.String())
		}
	}
}

// waitNode waits up to 3 minutes until node satisfies ok, and returns it.
func waitNode(ctx context.Context, t *testing.T, node, what string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && ok(n) {
			return n
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			state := fmt.Sprint(err)
			if n != nil {
				state = fmt.Sprintf("taints %v, unschedulable %v, annotations %v, conditions %v", n.Spec.Taints, n.Spec.Unschedulable, n.Annotations, n.Status.Conditions)
			}
			t.Fatalf("node %s not %s: %s; orders: %s", node, what, state, ordersFor(ctx, t, node))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func conditionIs(n *corev1.Node, t string, s corev1.ConditionStatus) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == t {
			return c.Status == s
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// ordersFor lists the actions of the NodeRemediations for node,
// comma-separated.
func ordersFor(ctx context.Context, t *testing.T, node string) string {
	t.Helper()
	list, err := cluster.Dynamic.Resource(sim.NodeRemediationGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, o := range list.Items {
		if n, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName"); n == node {
			action, _, _ := unstructured.NestedString(o.Object, "spec", "action")
			out = append(out, action)
		}
	}
	return strings.Join(out, ",")
}
