package controller_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
)

// turns starts n nodes of pool whose one pod each is held by a
// PodDisruptionBudget that allows no disruption, so that a drain that has
// its turn shows as NodeDrainBlocked until the drain deadline, and expires
// them all at once under a policy without a pool bound.
func (h *harness) turns(pool string, n int, maxConcurrent *int32) ([]string, time.Time) {
	h.t.Helper()
	h.policy(pool, v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/pool": pool}},
		MaxUnhealthy: ptr(intstr.FromString("100%")),
		Drain:        &v1alpha1.DrainPolicy{MaxConcurrent: maxConcurrent},
	})
	if err := repairtest.Namespace(h.ctx, k8s, pool); err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", pool, i)
		names = append(names, name)
		h.node(name, repairtest.Labels("example.com/pool", pool))
		must[*corev1.Pod](h.t)(repairtest.Pod(h.ctx, k8s, pool, name, name, repairtest.OwnedBy("apps/v1", "ReplicaSet", name), repairtest.PodLabels("app", name)))
		must[*policyv1PDB](h.t)(repairtest.PDB(h.ctx, k8s, pool, name, name, 1, 0))
	}
	return names, h.expire(names...)
}

// draining lists the nodes whose drain has run (blocked by their PDB).
func (h *harness) draining(names []string) []string {
	var out []string
	for _, n := range names {
		if len(h.events(n, "NodeDrainBlocked")) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// Every due node is tainted at once; the drains then take turns under the
// policy's drain.maxConcurrent; at the drain deadline the turns go on until
// every node is repaired.
func TestDecideFirstThenDrainsTakeTurns(t *testing.T) {
	h := start(t)
	names, due := h.turns("turns", 3, ptr[int32](1))
	h.advanceTo(due)
	h.eventually("every due node tainted", func() bool {
		for _, n := range names {
			if !h.tainted(n) {
				return false
			}
		}
		return true
	})
	h.eventually("one drain running", func() bool { return len(h.draining(names)) == 1 })
	h.advance(10 * time.Second) // a drain pass later
	h.consistently("only one drain at a time", func() bool { return len(h.draining(names)) == 1 })

	for h.clock.Now().Before(due.Add(10 * time.Minute)) {
		h.advance(10 * time.Second)
	}
	h.eventually("every node repaired, one turn after the other", func() bool {
		h.advance(10 * time.Second)
		for _, n := range names {
			if !h.gone(n) {
				return false
			}
		}
		return true
	})
}

// The controller's bound (--max-concurrent-drains) applies over policies
// that set none.
func TestControllerBoundsDrains(t *testing.T) {
	h := start(t, func(o *controller.Options) { o.MaxConcurrentDrains = 2 })
	names, due := h.turns("bound", 4, nil)
	h.advanceTo(due)
	h.eventually("two drains running", func() bool { return len(h.draining(names)) == 2 })
	h.advance(10 * time.Second)
	h.consistently("no third drain", func() bool { return len(h.draining(names)) == 2 })
	for _, n := range names {
		if !h.tainted(n) {
			t.Errorf("%s not tainted while it waits its turn", n)
		}
	}
}
