package controller_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// TestGateCountsFollowTheFleet churns a fleet through the API server — nodes
// added, deleted, moved between pools and zones, faulted and healed, a
// policy created and changed, the controller restarted — and checks that,
// once the cache has caught up, the counts the gate decides on (kept by the
// Node informer's events) equal a walk over every cached node, and that the
// walk equals the API server's own nodes. An under-count would let the
// controller take more of a pool than the gate allows. The faults are fresh
// (well inside their toleration on the fake clock), so nothing is repaired
// and the fleet only changes by this test's hand.
func TestGateCountsFollowTheFleet(t *testing.T) {
	h := newHarness(t)
	run := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.stop = run.stop
	rng := rand.New(rand.NewPCG(24, 24))
	pools := []string{"np-a", "np-b", "np-c"}
	zones := []string{"", "zone-1", "zone-2"}
	alive := map[string]bool{}
	var seq int

	addNode := func() {
		seq++
		name := fmt.Sprintf("gc-%d", seq)
		opts := []repairtest.NodeOpt{repairtest.Labels(karpenter.NodePoolLabel, pools[rng.IntN(len(pools))])}
		if z := zones[rng.IntN(len(zones))]; z != "" {
			opts = append(opts, repairtest.Zone(z))
		}
		h.node(name, opts...)
		alive[name] = true
	}
	anyNode := func() string {
		for name := range alive {
			return name
		}
		return ""
	}
	relabel := func(name string) {
		n := h.get(name)
		if n == nil {
			return
		}
		p := client.MergeFrom(n.DeepCopy())
		n.Labels[karpenter.NodePoolLabel] = pools[rng.IntN(len(pools))]
		if z := zones[rng.IntN(len(zones))]; z != "" {
			n.Labels[pool.ZoneLabel] = z
		} else {
			delete(n.Labels, pool.ZoneLabel)
		}
		if err := k8s.Patch(h.ctx, n, p); err != nil {
			t.Fatal(err)
		}
	}
	churn := func(steps int) {
		for range steps {
			switch op := rng.IntN(10); {
			case op < 3 || len(alive) < 5:
				addNode()
			case op < 4:
				name := anyNode()
				if err := k8s.Delete(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
					t.Fatal(err)
				}
				delete(alive, name)
			case op < 6:
				relabel(anyNode())
			case op < 8:
				typ := []corev1.NodeConditionType{corev1.NodeConditionType(health.KernelReady), corev1.NodeConditionType(health.NetworkingReady)}[rng.IntN(2)]
				h.fault(anyNode(), typ, corev1.ConditionFalse, "Injected", h.clock.Now())
			default:
				name := anyNode()
				h.heal(name, corev1.NodeConditionType(health.KernelReady))
				h.heal(name, corev1.NodeConditionType(health.NetworkingReady))
			}
		}
	}
	// settled: for every node, the tallies equal the walk, and the walk
	// counts what the API server holds.
	settled := func(what string, rec func() *running) {
		t.Helper()
		var last string
		deadline := time.Now().Add(30 * time.Second)
		for {
			last = h.countsDiffer(rec().rec, alive)
			if last == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	current := func() *running { return run }

	for range 12 {
		addNode()
	}
	churn(40)
	settled("after churn", current)

	// A policy for np-b that counts only NetworkingReady: KernelReady faults
	// of np-b stop counting, and the tallies must follow the new set.
	h.policy("np-b-network-only", v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{karpenter.NodePoolLabel: "np-b"}},
		Rules:        []v1alpha1.RepairRule{{ConditionType: string(health.NetworkingReady), Status: corev1.ConditionFalse, Toleration: metav1.Duration{Duration: time.Hour}}},
	})
	churn(20)
	settled("after a policy was created", current)

	pol := &v1alpha1.NodeRepairPolicy{}
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: "np-b-network-only"}, pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.NodeSelector.MatchLabels[karpenter.NodePoolLabel] = "np-c"
	if err := k8s.Update(h.ctx, pol); err != nil {
		t.Fatal(err)
	}
	churn(20)
	settled("after the policy moved to np-c", current)

	// A fresh controller starts from a list, not from events it saw.
	run.stop()
	churn(15)
	run = h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.stop = run.stop
	settled("after a restart", current)
}

// countsDiffer says how the gate's counts for some node differ from a walk of
// the cache, or the walk from the API server's nodes; "" when all agree.
func (h *harness) countsDiffer(rec *controller.Reconciler, alive map[string]bool) string {
	list := &corev1.NodeList{}
	if err := k8s.List(h.ctx, list); err != nil {
		return err.Error()
	}
	if len(list.Items) != len(alive) {
		return fmt.Sprintf("the API server has %d nodes, the test made %d", len(list.Items), len(alive))
	}
	perPool := map[string]int{}
	for _, n := range list.Items {
		perPool[n.Labels[karpenter.NodePoolLabel]]++
	}
	for _, n := range list.Items {
		tallied, walked, synced, err := rec.GateCounts(h.ctx, n.Name)
		if err != nil {
			return err.Error()
		}
		if !synced {
			return "the tallies have not synced"
		}
		if tallied != walked {
			return fmt.Sprintf("%s: the tallies count %+v, the walk %+v", n.Name, tallied, walked)
		}
		if want := perPool[n.Labels[karpenter.NodePoolLabel]]; walked[0].Size != want {
			return fmt.Sprintf("%s: pool size %d in the cache, %d on the API server", n.Name, walked[0].Size, want)
		}
	}
	return ""
}
