//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/sim"
)

// A GPU that falls off the bus is detected, tolerated for the policy's
// window, and the node is drained and replaced through Karpenter; the pods
// end up running on the replacement.
func TestGPUFaultReplacedThroughKarpenter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-gpu", replicas: 2, maxUnavail: 1, condition: gpuCondition, toleration: "5s", deadline: "2m", gate: "50%"}
	nodes := sc.setUp(ctx, t)
	sick := nodes[0]
	j := sc.watch(ctx, t, sick)
	inject(ctx, t, sick, xid79, j)

	cond, err := cluster.WaitCondition(ctx, sick, gpuCondition, corev1.ConditionFalse)
	if err != nil {
		t.Fatal(err)
	}
	if cond.Reason != "NvidiaXID79Error" {
		t.Errorf("condition reason %q, want NvidiaXID79Error", cond.Reason)
	}
	for _, m := range sim.RepairMilestones {
		reach(ctx, t, j, m)
	}
	fault, _ := j.At(sim.FaultWritten)
	tainted, _ := j.At(sim.Tainted)
	// The toleration runs from the condition's transition time, which is
	// the kernel record's timestamp (whole seconds of boot time, so up to
	// a second before the write).
	if got := tainted.Sub(fault); got < 4*time.Second {
		t.Errorf("tainted %v after the fault, before the 5s toleration", got)
	}
	if n := eventCount(ctx, t, sick, "NodeRepairSucceeded", 1); n != 1 {
		t.Errorf("NodeRepairSucceeded %d times, want 1", n)
	}
	repl := j.Replacement()
	if _, err := cluster.WaitCondition(ctx, repl, gpuCondition, corev1.ConditionTrue); err != nil {
		t.Errorf("replacement %s: %v", repl, err)
	}
	t.Logf("repair of %s:\n%s", sick, report(j))
}

// A storm that makes 40% of a pool unhealthy at once: above the 20% gate
// nodemend repairs nothing in the pool (docs/repair.md, The gates) and says so with
// NodeRepairBlocked on each node. Once an operator has dealt with one of
// them, the pool is back within the gate and the other is repaired.
func TestStormRepairsOnlyWhatTheGateAllows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-storm", replicas: 5, maxUnavail: 5, condition: gpuCondition, toleration: "3s", deadline: "1m", gate: "20%"}
	nodes := sc.setUp(ctx, t)
	sick := nodes[:2]
	var journeys []*sim.Journey
	for _, n := range sick {
		j := sc.watch(ctx, t, n)
		journeys = append(journeys, j)
		inject(ctx, t, n, xid79, j)
	}
	for _, n := range sick {
		if _, err := cluster.WaitCondition(ctx, n, gpuCondition, corev1.ConditionFalse); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sick {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, _ := events(ctx, t, n, "NodeRepairBlocked")
			if len(evs) > 0 && !strings.Contains(evs[0].Message, "2 of 5 nodes unhealthy") {
				t.Errorf("%s: blocked event does not give the pool's arithmetic: %q", n, evs[0].Message)
			}
			return len(evs) > 0, nil
		})
		if err != nil {
			t.Fatalf("%s: no NodeRepairBlocked event: %v", n, err)
		}
	}
	// Well past the toleration, still nothing is touched.
	time.Sleep(5 * time.Second)
	for _, n := range sick {
		if isTainted(ctx, t, n) {
			t.Fatalf("%s: under repair although 40%% of its pool is unhealthy", n)
		}
	}
	// The operator replaces one node by hand (kubectl delete nodeclaim).
	claims, err := cluster.Dynamic.Resource(sim.NodeClaimGVR).List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool=" + sc.pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if node, _, _ := unstructured.NestedString(c.Object, "status", "nodeName"); node == sick[0] {
			if err := cluster.Dynamic.Resource(sim.NodeClaimGVR).Delete(ctx, c.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reach(ctx, t, journeys[0], sim.NodeGone)
	if _, ok := journeys[0].At(sim.Tainted); ok {
		t.Errorf("%s: nodemend tainted the node the operator replaced", sick[0])
	}
	// 1 of 5 unhealthy is within 20%: the second node is repaired now.
	for _, m := range []sim.Milestone{sim.Tainted, sim.HandedOver, sim.NodeGone} {
		reach(ctx, t, journeys[1], m)
	}
	t.Logf("storm: both blocked; after the manual replacement of %s, %s repaired:\n%s", sick[0], sick[1], report(journeys[1]))
}

// A fault that clears inside the toleration leaves the node alone: no
// taint, no drain, no repair state.
func TestFaultClearingInsideTolerationLeavesNodeAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-flap", replicas: 1, maxUnavail: 1, condition: kernelCondition, toleration: "90s", deadline: "1m", gate: "100%"}
	node := sc.setUp(ctx, t)[0]
	fault := time.Now()
	inject(ctx, t, node, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service", nil)
	if _, err := cluster.WaitCondition(ctx, node, kernelCondition, corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	// The agent's quiet period for this reason is 1m, its floor (agentConfig).
	if _, err := cluster.WaitCondition(ctx, node, kernelCondition, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(fault); took > 90*time.Second {
		t.Fatalf("condition recovered after %v, not inside the 90s toleration", took)
	}
	// Watch past the end of the toleration the fault would have had.
	until := fault.Add(90*time.Second + 5*time.Second)
	for time.Now().Before(until) {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if record.HasTaint(n) || record.InRepair(n) {
			t.Fatalf("node under repair after a fault that cleared: taints %v, annotations %v", n.Spec.Taints, n.Annotations)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, n := events(ctx, t, node, "NodeRepairStarted"); n != 0 {
		t.Errorf("NodeRepairStarted %d times for a fault that cleared", n)
	}
}

// A PodDisruptionBudget that allows no disruption holds the drain until
// the policy's deadline; then the remaining pods are deleted and the
// repair goes on.
func TestPDBHoldsTheDrainUntilItsDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-pdb", replicas: 1, maxUnavail: 0, condition: gpuCondition, toleration: "2s", deadline: "20s", gate: "100%"}
	node := sc.setUp(ctx, t)[0]
	j := sc.watch(ctx, t, node)
	inject(ctx, t, node, xid79, j)
	tainted := reach(ctx, t, j, sim.Tainted)
	evicted := reach(ctx, t, j, sim.PodsEvicted)
	// The repair's start is recorded in whole seconds, so the deadline may
	// fall up to a second before tainted+20s.
	if held := evicted.Sub(tainted); held < 19*time.Second {
		t.Errorf("pods left the node %v after the taint, before the 20s drain deadline", held)
	}
	if _, n := events(ctx, t, node, "NodeDrainBlocked"); n == 0 {
		t.Error("no NodeDrainBlocked event while the PDB refused evictions")
	}
	if n := eventCount(ctx, t, node, "NodeDrainDeadlineExceeded", 1); n != 1 {
		t.Errorf("NodeDrainDeadlineExceeded %d times, want 1", n)
	}
	reach(ctx, t, j, sim.NodeGone)
	reach(ctx, t, j, sim.PodsRunning)
	t.Logf("drain held %v by the PDB:\n%s", evicted.Sub(tainted).Round(time.Millisecond), report(j))
}

// The controller leader is killed in the middle of a drain; the other
// replica takes the Lease over and finishes the repair, exactly once.
func TestLeaderKilledMidRepair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-leader", replicas: 1, maxUnavail: 0, condition: gpuCondition, toleration: "2s", deadline: "30s", gate: "100%"}
	node := sc.setUp(ctx, t)[0]
	j := sc.watch(ctx, t, node)
	inject(ctx, t, node, xid79, j)
	reach(ctx, t, j, sim.Tainted)

	leader, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, evicted := j.At(sim.PodsEvicted); evicted {
		t.Fatal("the drain ended before the leader could be killed; the test proves nothing")
	}
	cluster.Controller(leader).Kill()
	killed := time.Now()
	t.Logf("killed leader nodemend-controller-%d mid-drain", leader)

	reach(ctx, t, j, sim.NodeGone)
	reach(ctx, t, j, sim.PodsRunning)
	newLeader, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newLeader == leader {
		t.Fatalf("replica %d leads again although it was killed", leader)
	}
	gone, _ := j.At(sim.NodeGone)
	t.Logf("replica %d took over; node gone %v after the kill", newLeader, gone.Sub(killed).Round(time.Millisecond))

	// The killed leader's NodeRepairStarted may die with it (events are
	// sent asynchronously); what must never happen is a second repair.
	if _, n := events(ctx, t, node, "NodeRepairStarted"); n > 1 {
		t.Errorf("NodeRepairStarted %d times", n)
	}
	for _, reason := range []string{"NodeRepairHandedOver", "NodeRepairSucceeded"} {
		if n := eventCount(ctx, t, node, reason, 1); n != 1 {
			t.Errorf("%s %d times, want 1", reason, n)
		}
	}
	// Karpenter removes the old NodeClaim's finalizer just after the node;
	// then the pool holds the replacement only.
	var claims int
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cluster.Dynamic.Resource(sim.NodeClaimGVR).List(ctx, metav1.ListOptions{LabelSelector: "karpenter.sh/nodepool=" + sc.pool})
		if err != nil {
			return false, err
		}
		claims = len(list.Items)
		return claims == 1, nil
	})
	if claims != 1 {
		t.Errorf("%d NodeClaims in the pool after one repair, want 1 (the replacement)", claims)
	}
	if repl := j.Replacement(); isTainted(ctx, t, repl) {
		t.Errorf("replacement %s is under repair too", repl)
	}
	if _, err := cluster.StartController(leader); err != nil {
		t.Fatal(err)
	}
}
