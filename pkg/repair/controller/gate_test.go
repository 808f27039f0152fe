package controller_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// karpenterPool creates a NodePool and n nodes in it, each with its NodeClaim.
func (h *harness) karpenterPool(np string, n int, opts ...repairtest.NodeOpt) []string {
	h.t.Helper()
	must[*unstructured.Unstructured](h.t)(repairtest.NodePool(h.ctx, k8s, np))
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", np, i)
		nc := must[*unstructured.Unstructured](h.t)(repairtest.NodeClaim(h.ctx, k8s, name, np, false))
		h.node(name, append([]repairtest.NodeOpt{repairtest.InNodePool(np, nc)}, opts...)...)
		names = append(names, name)
	}
	return names
}

func (h *harness) expire(names ...string) time.Time {
	h.t.Helper()
	for _, n := range names {
		h.fault(n, "KernelReady", "False", "KernelDeadlock", h.t0)
	}
	for _, n := range names {
		h.waitRecorded(n)
	}
	return h.t0.Add(30 * time.Minute)
}

// With 20%: 1 unhealthy node of 3 may be repaired (20% of 3 = 0.6, rounded up
// to 1).
func TestPoolGateOneOfThreeAllowed(t *testing.T) {
	h := start(t)
	nodes := h.karpenterPool("three", 3)
	h.advanceTo(h.expire(nodes[0]))
	h.eventually("the NodeClaim of three-0 deleted", func() bool { return !h.exists("karpenter.sh/v1", "NodeClaim", "", "three-0") })
	if !h.untouched(nodes[1]) || !h.untouched(nodes[2]) {
		t.Error("healthy nodes touched")
	}
}

// 3 unhealthy nodes of 10 is more than 20% (2): nothing in the pool is
// repaired, NodeRepairBlocked goes on each node and on the NodePool, once,
// and the gate is re-checked every 5 minutes. When one recovers, 2 of 10 are
// within the limit and both are repaired, without waiting for the re-check.
func TestPoolGateThreeOfTenBlockedTwoOfTenAllowed(t *testing.T) {
	h := start(t)
	nodes := h.karpenterPool("ten", 10)
	h.advanceTo(h.expire(nodes[0], nodes[1], nodes[2]))
	for _, n := range nodes[:3] {
		h.waitEvent(n, "NodeRepairBlocked", "pool NodePool/ten: 3 of 10 nodes unhealthy, more than the 2 that maxUnhealthy 20% allows")
	}
	h.waitEvent("ten", "NodeRepairBlocked", "3 of 10")
	// Re-checks every 5 minutes, still blocked: no new events.
	for range 3 {
		h.advance(5 * time.Minute)
		h.consistently("nothing repaired while blocked", func() bool {
			return h.untouched(nodes[0]) && h.untouched(nodes[1]) && h.untouched(nodes[2])
		})
	}
	for _, n := range append(nodes[:3:3], "ten") {
		if evs := h.events(n, "NodeRepairBlocked"); len(evs) != 1 || evs[0].Series != nil || evs[0].Count > 1 {
			t.Errorf("%s: NodeRepairBlocked events %+v, want exactly one, emitted once", n, evs)
		}
	}

	// Back under with a backlog, the repairs that waited start one drain
	// slot at a time (the breaker), woken by the recovery itself rather
	// than at the next re-check.
	h.recover(nodes[2], "KernelReady")
	h.eventually("2 of 10: both repaired", func() bool {
		return !h.exists("karpenter.sh/v1", "NodeClaim", "", nodes[0]) && !h.exists("karpenter.sh/v1", "NodeClaim", "", nodes[1])
	})
	for _, n := range nodes[2:] {
		if !h.untouched(n) || !h.exists("karpenter.sh/v1", "NodeClaim", "", n) {
			t.Errorf("%s touched", n)
		}
	}
}

// Pools are counted apart: the cluster group (nodes in no pool) being over
// its limit does not block a NodePool, and the other way round.
func TestPoolVersusClusterGrouping(t *testing.T) {
	h := start(t)
	pooled := h.karpenterPool("pooled", 5)
	var plain []string
	for i := range 5 {
		name := fmt.Sprintf("plain-%d", i)
		h.node(name)
		plain = append(plain, name)
	}
	// In one group of 10 nodes, 3 unhealthy would block everything. As two
	// groups: the pool has 1 of 5 (allowed), the cluster group 2 of 5
	// (blocked).
	h.advanceTo(h.expire(pooled[0], plain[0], plain[1]))
	h.eventually("the pooled node repaired", func() bool { return !h.exists("karpenter.sh/v1", "NodeClaim", "", pooled[0]) })
	h.waitEvent(plain[0], "NodeRepairBlocked", "pool cluster: 2 of 5 nodes unhealthy")
	h.waitEvent(plain[1], "NodeRepairBlocked", "pool cluster: 2 of 5 nodes unhealthy")
	if !h.untouched(plain[0]) || !h.untouched(plain[1]) {
		t.Error("blocked cluster-group nodes were touched")
	}
}

// Cluster API nodes are grouped by MachineDeployment (read from the
// Machine's labels), not by MachineSet: two unhealthy nodes in two
// MachineSets of one 5-node MachineDeployment are 2 of 5, blocked.
func TestClusterAPIGroupsByMachineDeployment(t *testing.T) {
	h := start(t)
	ns := "capi-gate"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	must[*unstructured.Unstructured](t)(repairtest.MachineDeployment(h.ctx, k8s, ns, "workers"))
	for i, ms := range []string{"workers-a", "workers-a", "workers-a", "workers-b", "workers-b"} {
		name := fmt.Sprintf("capi-%d", i)
		must[*unstructured.Unstructured](t)(repairtest.Machine(h.ctx, k8s, ns, name, ms, "workers"))
		h.node(name, repairtest.OfMachine(ns, name, ms))
	}
	h.advanceTo(h.expire("capi-0", "capi-3"))
	h.waitEvent("capi-0", "NodeRepairBlocked", "pool MachineDeployment/capi-gate/workers: 2 of 5")
	h.waitEvent("workers", "NodeRepairBlocked", "2 of 5")
	h.consistently("nothing repaired", func() bool { return h.untouched("capi-0") && h.untouched("capi-3") })
}

// A configured pool label groups nodes before the engines do.
func TestConfiguredPoolLabel(t *testing.T) {
	h := start(t, func(o *controller.Options) { o.PoolLabel = "example.com/rack" })
	for i := range 4 {
		h.node(fmt.Sprintf("rack-a-%d", i), repairtest.Labels("example.com/rack", "a"))
		h.node(fmt.Sprintf("rack-b-%d", i), repairtest.Labels("example.com/rack", "b"))
	}
	// Rack a: 1 of 4, allowed. Rack b: 2 of 4, blocked. (One cluster group
	// of 8 would allow 2 of 8... and block nothing; per rack it does.)
	h.advanceTo(h.expire("rack-a-0", "rack-b-0", "rack-b-1"))
	h.eventually("rack-a-0 repaired", func() bool { return h.gone("rack-a-0") })
	h.waitEvent("rack-b-0", "NodeRepairBlocked", "pool label/example.com/rack=b: 2 of 4")
	if !h.untouched("rack-b-1") {
		t.Error("rack-b-1 touched")
	}
}

// The zone gate applies the same rule within a topology zone, across pools:
// each pool has 1 unhealthy node of 4 (allowed), but zone-a has 2 of 5.
func TestZoneGate(t *testing.T) {
	h := start(t)
	for p := range 5 {
		np := fmt.Sprintf("zp%d", p)
		must[*unstructured.Unstructured](t)(repairtest.NodePool(h.ctx, k8s, np))
		for i := range 4 {
			zone := "zone-b"
			if i == 0 {
				zone = "zone-a"
			}
			name := fmt.Sprintf("%s-%d", np, i)
			nc := must[*unstructured.Unstructured](t)(repairtest.NodeClaim(h.ctx, k8s, name, np, false))
			h.node(name, repairtest.InNodePool(np, nc), repairtest.Zone(zone))
		}
	}
	h.advanceTo(h.expire("zp0-0", "zp1-0"))
	h.waitEvent("zp0-0", "NodeRepairBlocked", "zone zone-a: 2 of 5 nodes unhealthy, more than the 1")
	h.waitEvent("zp1-0", "NodeRepairBlocked", "zone zone-a")
	h.consistently("zone-a nodes untouched", func() bool { return h.untouched("zp0-0") && h.untouched("zp1-0") })
	// One unhealthy node in zone-b (16 nodes) is fine.
	h.fault("zp2-1", "KernelReady", "False", "KernelDeadlock", h.clock.Now())
	h.waitRecorded("zp2-1")
	h.advance(30 * time.Minute)
	h.eventually("zp2-1 repaired", func() bool { return !h.exists("karpenter.sh/v1", "NodeClaim", "", "zp2-1") })
}

// The pause switch stops every repair, with the operator's reason; lifting
// it resumes at once (the ConfigMap is watched).
func TestPause(t *testing.T) {
	h := start(t)
	for i := range 5 {
		h.node(fmt.Sprintf("pz-%d", i))
	}
	h.pause("INC-4711: kernel rollout under investigation")
	h.advanceTo(h.expire("pz-0"))
	h.waitEvent("pz-0", "NodeRepairBlocked", "repairs are paused cluster-wide: INC-4711: kernel rollout under investigation")
	h.consistently("paused", func() bool { return h.untouched("pz-0") })
	h.unpause()
	h.eventually("repaired after unpause", func() bool { return h.gone("pz-0") })
}

// A repair in progress stops at the next step when paused, and continues
// when the pause is lifted.
func TestPauseHaltsARepairInProgress(t *testing.T) {
	h := start(t)
	ns := "pause-drain"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		h.node(fmt.Sprintf("pd-%d", i))
	}
	must[*corev1Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "guarded", "pd-0", repairtest.OwnedBy("apps/v1", "ReplicaSet", "db"), repairtest.PodLabels("app", "db")))
	pdb := must[*policyv1PDB](t)(repairtest.PDB(h.ctx, k8s, ns, "db", "db", 1, 0))
	h.advanceTo(h.expire("pd-0"))
	h.eventually("draining", func() bool { return h.phase("pd-0") == string(record.PhaseDraining) })
	h.pause("maintenance window")
	h.waitEvent("pd-0", "NodeRepairBlocked", "halted")
	// The PDB now allows it, but the repair is paused.
	if err := repairtest.SetPDBStatus(h.ctx, k8s, pdb, 1, 1); err != nil {
		t.Fatal(err)
	}
	h.advance(time.Minute)
	h.consistently("no eviction while paused", func() bool { return !h.podTerminating(ns, "guarded") })
	h.unpause()
	h.eventually("evicted after the pause", func() bool { return h.podTerminating(ns, "guarded") })
}

// The veto annotation keeps a node from being repaired, with its reason.
func TestVeto(t *testing.T) {
	h := start(t)
	for i := range 5 {
		h.node(fmt.Sprintf("veto-%d", i))
	}
	h.annotate("veto-0", record.VetoAnnotation, ptr("keeping it for the GPU vendor"))
	h.advanceTo(h.expire("veto-0"))
	h.waitEvent("veto-0", "NodeRepairBlocked", "repair vetoed by the node's annotation: keeping it for the GPU vendor")
	h.consistently("vetoed", func() bool { return h.untouched("veto-0") })
	h.annotate("veto-0", record.VetoAnnotation, nil)
	h.eventually("repaired after the veto is lifted", func() bool { return h.gone("veto-0") })
}

// Dry run: the event and the log, no write at all to the node.
func TestDryRun(t *testing.T) {
	h := start(t, func(o *controller.Options) { o.DryRun = true })
	for i := range 5 {
		h.node(fmt.Sprintf("dry-%d", i))
	}
	h.fault("dry-0", "KernelReady", "False", "KernelDeadlock", h.t0)
	rv := h.get("dry-0").ResourceVersion
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.waitEvent("dry-0", "NodeRepairWouldStart", "dry run: would taint, drain and replace this node: KernelReady=False/KernelDeadlock")
	h.advance(10 * time.Minute)
	h.consistently("dry run writes nothing", func() bool { n := h.get("dry-0"); return n != nil && n.ResourceVersion == rv })
	if evs := h.events("dry-0", "NodeRepairWouldStart"); len(evs) != 1 {
		t.Errorf("%d NodeRepairWouldStart events, want 1", len(evs))
	}
}

// A node blocked for one reason and then another gets two NodeRepairBlocked
// events, each with its own message: the events library folds an event
// into the series of an earlier one with the same reason and action within
// minutes whatever its note says, and the second reason was lost.
func TestChangedBlockedMessageIsRecorded(t *testing.T) {
	h := start(t)
	nodes := h.karpenterPool("fold", 10)
	h.advanceTo(h.expire(nodes[0], nodes[1], nodes[2]))
	h.waitEvent(nodes[0], "NodeRepairBlocked", "3 of 10 nodes unhealthy")
	h.pause("a maintenance window")
	h.advance(5 * time.Minute) // the re-check
	h.waitEvent(nodes[0], "NodeRepairBlocked", "a maintenance window")
}
