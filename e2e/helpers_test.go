//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/sim"
)

const (
	gpuCondition    = corev1.NodeConditionType("AcceleratedHardwareReady")
	kernelCondition = corev1.NodeConditionType("KernelReady")
	xid79           = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=trainer, GPU has fallen off the bus."
)

// scenario is one test's pool, policy and workload.
type scenario struct {
	pool       string
	replicas   int
	maxUnavail int
	condition  corev1.NodeConditionType
	toleration string
	deadline   string
	gate       string
}

// setUp applies the scenario and returns its nodes once the workload runs,
// every node's agent reporting the condition True.
func (sc scenario) setUp(ctx context.Context, t *testing.T) []string {
	t.Helper()
	if !slices.Contains(zones, sc.pool) {
		t.Fatalf("pool %s has no zone of its own: add it to zones (main_test.go)", sc.pool)
	}
	labels := map[string]string{}
	if sc.condition == gpuCondition {
		labels[sim.GPULabel] = "1"
		labels["nodemend.dev/expected-gpu-count"] = "1"
	}
	manifests := strings.Join([]string{
		sim.NodePoolInZone(sc.pool, "c-4x-amd64-linux", sc.pool, labels),
		sim.RepairPolicy(sc.pool, "karpenter.sh/nodepool", sc.pool, string(sc.condition), sc.toleration, sc.deadline, sc.gate),
		sim.Workload(sc.pool, "app", sc.pool, sc.replicas, "2", sc.maxUnavail),
	}, "---\n")
	if err := cluster.Apply(ctx, manifests); err != nil {
		t.Fatal(err)
	}
	placed, err := cluster.WaitWorkload(ctx, sc.pool, "app=app", sc.replicas)
	if err != nil {
		t.Fatal(err)
	}
	nodes := sim.Nodes(placed)
	for _, n := range nodes {
		if _, err := cluster.WaitCondition(ctx, n, sc.condition, corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
		node, err := cluster.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if z := node.Labels[corev1.LabelTopologyZone]; z != sc.pool {
			t.Fatalf("node %s of pool %s is in zone %q, want its own", n, sc.pool, z)
		}
	}
	return nodes
}

// watch starts a Journey for node in the scenario's workload.
func (sc scenario) watch(ctx context.Context, t *testing.T, node string) *sim.Journey {
	t.Helper()
	j, err := cluster.WatchRepair(ctx, node, sc.condition, sc.pool, "app=app", sc.replicas)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// inject writes a kernel log line on node and marks the journey.
func inject(ctx context.Context, t *testing.T, node, line string, j *sim.Journey) {
	t.Helper()
	h, err := cluster.Host(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	at, err := h.Kmsg(line)
	if err != nil {
		t.Fatal(err)
	}
	if j != nil {
		j.Mark(sim.FaultWritten, at)
	}
}

func reach(ctx context.Context, t *testing.T, j *sim.Journey, m sim.Milestone) time.Time {
	t.Helper()
	at, err := j.Wait(ctx, m)
	if err != nil {
		t.Fatalf("%v\n%s", err, report(j))
	}
	return at
}

func report(j *sim.Journey) string {
	var b strings.Builder
	for _, st := range j.Durations() {
		fmt.Fprintf(&b, "  +%-9v %s\n", st.SinceFault.Round(time.Millisecond), st.Milestone)
	}
	return b.String()
}

// events are the events about node with reason, and how many times each
// happened (an event series counts repeats).
func events(ctx context.Context, t *testing.T, node, reason string) (list []corev1.Event, occurrences int) {
	t.Helper()
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", node), fields.OneTermEqualSelector("reason", reason)).String()
	evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		n := int(e.Count)
		if e.Series != nil && int(e.Series.Count) > n {
			n = int(e.Series.Count)
		}
		occurrences += max(n, 1)
	}
	return evs.Items, occurrences
}

func isTainted(ctx context.Context, t *testing.T, node string) bool {
	t.Helper()
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return hasTaint(n, "nodemend.dev/repair")
}

// eventCount waits (events are written asynchronously) until node has at
// least want events with reason, or 15 s passed, and returns how many
// times it happened.
func eventCount(ctx context.Context, t *testing.T, node, reason string, want int) int {
	t.Helper()
	var n int
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, n = events(ctx, t, node, reason)
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}
