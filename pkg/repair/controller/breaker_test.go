package controller_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// A storm crosses a pool's threshold both ways, against the real API
// server, with one drain slot. Up: a repair that started before the storm
// goes on and finishes while the pool is over, and nothing new starts.
// Down: the gates alone would start both repairs that waited at once (2 of
// 9 is within 20%); the breaker starts the one due first, and the other
// only when the drain slot frees — then without waiting for its recheck.
func TestBreakerStormCrossesThePoolThresholdBothWays(t *testing.T) {
	h := newHarness(t, func(o *controller.Options) {
		o.PoolLabel = "example.com/rack"
		o.MaxConcurrentDrains = 1
	})
	m := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.reg, h.stop = m.reg, m.stop
	const poolKey = "label/example.com/rack=storm"
	ns := "breaker-storm"
	if err := repairtest.Namespace(h.ctx, k8s, ns); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for i := range 10 {
		name := fmt.Sprintf("st-%d", i)
		h.node(name, repairtest.Labels("example.com/rack", "storm"))
		nodes = append(nodes, name)
	}
	// A pod on st-0 and on st-4 keeps each one's drain (and the only
	// drain slot) until the test, as their kubelet, lets the pod go.
	pod := func(node string) *corev1Pod {
		return must[*corev1Pod](t)(repairtest.Pod(h.ctx, k8s, ns, "on-"+node, node, repairtest.OwnedBy("apps/v1", "ReplicaSet", "rs-"+node)))
	}
	terminated := func(p *corev1Pod) {
		t.Helper()
		h.eventually(p.Name+" evicted", func() bool { return h.podTerminating(ns, p.Name) })
		if err := k8s.Delete(h.ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		h.advance(10 * time.Second) // the next drain pass
	}
	p0, p4 := pod("st-0"), pod("st-4")

	// Under the threshold: st-0 starts and drains.
	h.advanceTo(h.expire("st-0"))
	h.eventually("st-0 draining", func() bool { return h.phase("st-0") == string(record.PhaseDraining) })

	// Up: four more faults, due in the reverse of their names' order; 5 of
	// 10 unhealthy, over the 2 that 20% allows.
	for i, n := range []string{"st-4", "st-3", "st-2", "st-1"} {
		h.fault(n, "KernelReady", "False", "KernelDeadlock", h.clock.Now().Add(time.Duration(i-4)*time.Minute))
		h.waitRecorded(n)
	}
	h.advance(30 * time.Minute) // every storm node is due
	for _, n := range nodes[1:5] {
		h.waitEvent(n, "NodeRepairBlocked", "pool "+poolKey+": 5 of 10 nodes unhealthy")
	}
	// The repair started before the storm is not held: it finishes.
	terminated(p0)
	h.eventually("st-0 repaired while the pool is over", func() bool { return h.gone("st-0") })
	h.advance(5 * time.Minute)
	h.consistently("nothing starts while over", func() bool {
		return h.untouched("st-1") && h.untouched("st-2") && h.untouched("st-3") && h.untouched("st-4")
	})
	if got := m.rec.Backlog(poolKey); !slices.Equal(got, []string{"st-4", "st-3", "st-2", "st-1"}) {
		t.Fatalf("backlog %v, want the storm's nodes oldest first", got)
	}

	// Down: two faults were transient; 2 of 9, within the threshold. At the
	// recheck the oldest (st-4) starts with the drain slot; st-3 waits for
	// it, metered, untouched.
	h.recover("st-1", "KernelReady")
	h.recover("st-2", "KernelReady")
	h.advance(5 * time.Minute)
	h.eventually("st-4, due first, draining", func() bool { return h.phase("st-4") == string(record.PhaseDraining) })
	h.waitEvent("st-3", "NodeRepairBlocked", "back under its threshold")
	h.consistently("st-3 waits for the drain slot", func() bool { return h.untouched("st-3") })

	// The slot frees: st-3 starts at once (no recheck), and is repaired.
	terminated(p4)
	h.eventually("st-4 repaired", func() bool { return h.gone("st-4") })
	h.eventually("st-3 repaired after st-4, without a recheck", func() bool { return h.gone("st-3") })
	if got := m.rec.Backlog(poolKey); len(got) != 0 {
		t.Errorf("backlog %v after the storm, want empty", got)
	}
	for _, n := range []string{"st-1", "st-2", "st-5"} {
		if !h.untouched(n) {
			t.Errorf("%s touched", n)
		}
	}
}
