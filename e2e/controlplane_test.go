//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/cli"
)

// A node labelled node-role.kubernetes.io/control-plane, faulted past its
// toleration under a policy that does not opt control-plane nodes in (the
// default), is not repaired: a NodeRepairBlocked event names it and why,
// it stays untainted and schedulable with no order for its agent through
// the controller's rechecks, and kubectl mend explain says the same.
func TestControlPlaneNodeIsNotRepairedByDefault(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "e2e-control-plane"
	host, _ := plainNode(ctx, t, node, "e2e-control-plane", kernelCondition,
		map[string]string{"node-role.kubernetes.io/control-plane": ""}, `
  ladder:
  - {action: Reboot, attempts: 1, timeout: 1m}
  - action: Quarantine`)

	// The fault the reboot test repairs; its quiet period (1 m, main_test.go)
	// keeps KernelReady False through the test.
	t0 := time.Now()
	if _, err := host.Kmsg("cgroup: fork rejected by pids controller in /system.slice/kubelet.service"); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node, "KernelReady False", func(n *corev1.Node) bool {
		return conditionIs(n, string(kernelCondition), corev1.ConditionFalse)
	})

	want := node + " is a control-plane node (the control-plane role label): control-plane nodes are not repaired unless the node's NodeRepairPolicy opts them in"
	blocked := waitEvent(ctx, t, node, "NodeRepairBlocked", want)
	// The controller reconsiders a blocked repair every 5 s here
	// (--recheck-interval): two rechecks later the node is still left alone.
	time.Sleep(12 * time.Second)
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !conditionIs(n, string(kernelCondition), corev1.ConditionFalse) {
		t.Fatalf("KernelReady no longer False after the rechecks: the test shows nothing; conditions %v", n.Status.Conditions)
	}
	if hasTaint(n, "nodemend.dev/repair") || n.Spec.Unschedulable {
		t.Errorf("control-plane node repaired: taints %v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
	}
	if orders := ordersFor(ctx, t, node); orders != "" {
		t.Errorf("orders for the control-plane node: %q, want none", orders)
	}
	if host.Reboots() != 0 {
		t.Errorf("control-plane node rebooted %d times", host.Reboots())
	}
	mendShows(ctx, t, []string{"explain", "node/" + node},
		node+" is a control-plane node (the control-plane role label): nodemend does not repair control-plane nodes unless their NodeRepairPolicy opts them in",
		"spec.controlPlane: Repair")
	t.Logf("FIGURE control-plane skip: fault → NodeRepairBlocked %s", blocked.Sub(t0).Round(100*time.Millisecond))
}

// waitEvent waits up to 2 minutes for an event about node with reason
// whose message contains want, and returns when it was seen.
func waitEvent(ctx context.Context, t *testing.T, node, reason, want string) time.Time {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, _ := events(ctx, t, node, reason)
		for _, e := range list {
			if strings.Contains(e.Message, want) {
				return time.Now()
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var got []string
			for _, e := range list {
				got = append(got, e.Message)
			}
			t.Fatalf("no %s event about %s saying %q; got %q; orders: %s", reason, node, want, got, ordersFor(ctx, t, node))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mendShows checks that kubectl mend with args shows each of want.
func mendShows(ctx context.Context, t *testing.T, args []string, want ...string) {
	t.Helper()
	var out bytes.Buffer
	mend := cli.NewRootCommand(cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	mend.SetArgs(append([]string{"--kubeconfig", cluster.Kubeconfig}, args...))
	if err := mend.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl mend %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("kubectl mend %s does not show %q:\n%s", strings.Join(args, " "), w, out.String())
		}
	}
}
