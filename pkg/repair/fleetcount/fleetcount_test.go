package fleetcount

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// walk is the gate's count done the slow way, over every node: what the
// tallies must always equal.
func walk(nodes map[string]*corev1.Node, self *corev1.Node, r pool.Resolver, p pool.Pool, zone string, set *policy.Set, machines pool.MachineLookup) (gate.Group, *gate.Group) {
	pg := gate.Group{Name: p.String()}
	var zg *gate.Group
	if zone != "" {
		zg = &gate.Group{Name: zone}
	}
	count := func(n *corev1.Node) {
		u := Unhealthy(n, set)
		if r.Of(n, machines) == p {
			pg.Add(u)
		}
		if zg != nil && n.Labels[pool.ZoneLabel] == zone {
			zg.Add(u)
		}
	}
	for name, n := range nodes {
		if name != self.Name {
			count(n)
		}
	}
	count(self)
	return pg, zg
}

// policies returns a policy set in which nodes labelled team=a are unhealthy
// only when KernelReady is False (Ready is not a rule of theirs), or, with
// strict, also when NetworkingReady is False.
func policies(t testing.TB, strict bool) *policy.Set {
	t.Helper()
	rules := []v1alpha1.RepairRule{{ConditionType: "KernelReady", Status: corev1.ConditionFalse, Toleration: metav1.Duration{Duration: time.Minute}}}
	if strict {
		rules = append(rules, v1alpha1.RepairRule{ConditionType: "NetworkingReady", Status: corev1.ConditionFalse, Toleration: metav1.Duration{Duration: time.Minute}})
	}
	set, problems := policy.NewSet([]v1alpha1.NodeRepairPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: types.UID(fmt.Sprint("uid-", strict))},
		Spec: v1alpha1.NodeRepairPolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			Rules:        rules,
		},
	}})
	if len(problems) != 0 {
		t.Fatalf("policy problems: %v", problems)
	}
	return set
}

// randomNode is a node with a random pool (label, Karpenter NodePool or a
// Cluster API Machine), zone, team and conditions.
func randomNode(rng *rand.Rand, name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	switch rng.IntN(3) {
	case 0:
		n.Labels["pool"] = fmt.Sprint("p", rng.IntN(3))
	case 1:
		n.Labels[karpenter.NodePoolLabel] = fmt.Sprint("np", rng.IntN(2))
	case 2:
		n.Annotations[clusterapi.MachineAnnotation] = fmt.Sprint("m", rng.IntN(4))
		n.Annotations[clusterapi.ClusterNamespaceAnnotation] = "ns"
	}
	if z := rng.IntN(3); z > 0 {
		n.Labels[pool.ZoneLabel] = fmt.Sprint("z", z)
	}
	if rng.IntN(2) == 0 {
		n.Labels["team"] = "a"
	}
	status := func() corev1.ConditionStatus {
		if rng.IntN(4) == 0 {
			return corev1.ConditionFalse
		}
		return corev1.ConditionTrue
	}
	for _, t := range []corev1.NodeConditionType{corev1.NodeReady, "KernelReady", "NetworkingReady"} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: status()})
	}
	if rng.IntN(10) == 0 {
		n.Annotations[record.StateAnnotation] = `{"version":1,"phase":"Draining","trigger":{"type":"KernelReady","status":"False"},"started":"2026-03-01T12:00:00Z"}`
	}
	return n
}

// TestTalliesEqualTheWalkUnderChurn drives the tallies with a random stream
// of adds, updates (relabels between pools and zones, condition flips,
// repairs starting), deletes (some as tombstones) and policy changes, and
// after every event compares each pool's and zone's count with a walk over
// the same nodes, Cluster API machines moving between deployments included.
func TestTalliesEqualTheWalkUnderChurn(t *testing.T) {
	resolver := backends.Pools("pool")
	machinePools := map[string]string{}
	machines := func(ns, name string) (pool.Machine, bool) {
		md, ok := machinePools[name]
		if !ok {
			return pool.Machine{}, false
		}
		return pool.Machine{Labels: map[string]string{clusterapi.MachineDeploymentLabel: md}}, true
	}
	sets := []*policy.Set{nil, policies(t, false), policies(t, true)}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		c := New(resolver, true)
		h := c.Handler()
		nodes := map[string]*corev1.Node{}
		set := sets[0]
		for step := 0; step < 400; step++ {
			name := fmt.Sprint("n", rng.IntN(40))
			switch op := rng.IntN(10); {
			case op < 6:
				n := randomNode(rng, name)
				if old, ok := nodes[name]; ok {
					h.OnUpdate(old, n)
				} else {
					h.OnAdd(n, false)
				}
				nodes[name] = n
			case op < 8:
				if old, ok := nodes[name]; ok {
					if rng.IntN(2) == 0 {
						h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: name, Obj: old})
					} else {
						h.OnDelete(old)
					}
					delete(nodes, name)
				}
			case op < 9:
				set = sets[rng.IntN(len(sets))]
			default:
				machinePools[fmt.Sprint("m", rng.IntN(4))] = fmt.Sprint("md", rng.IntN(2))
			}
			// A decision on a node as the reconcile read it: possibly newer
			// than its last event, possibly not observed at all yet.
			self := randomNode(rng, fmt.Sprint("n", rng.IntN(45)))
			p := resolver.Of(self, machines)
			zone := self.Labels[pool.ZoneLabel]
			gotP, gotZ := c.Group(self, p, zone, set, machines)
			wantP, wantZ := walk(nodes, self, resolver, p, zone, set, machines)
			if gotP != wantP {
				t.Fatalf("seed %d step %d: pool %s counted %+v, the walk counts %+v", seed, step, p, gotP, wantP)
			}
			if (gotZ == nil) != (wantZ == nil) || (gotZ != nil && *gotZ != *wantZ) {
				t.Fatalf("seed %d step %d: zone %q counted %v, the walk counts %v", seed, step, zone, gotZ, wantZ)
			}
		}
		if c.Len() != len(nodes) {
			t.Fatalf("seed %d: %d nodes counted, %d exist", seed, c.Len(), len(nodes))
		}
	}
}

// TestEmptyGroupsAreForgotten: a pool whose last node left is not kept as an
// empty tally (a fleet that churns through pool names must not grow).
func TestEmptyGroupsAreForgotten(t *testing.T) {
	c := New(backends.Pools("pool"), false)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 100 {
		n := randomNode(rng, fmt.Sprint("n", i))
		n.Labels["pool"] = fmt.Sprint("p", i)
		c.Upsert(n)
		c.Delete(n.Name)
	}
	if len(c.pools) != 0 || len(c.zones) != 0 || len(c.nodes) != 0 {
		t.Fatalf("after every node left: %d pools, %d zones, %d nodes kept", len(c.pools), len(c.zones), len(c.nodes))
	}
}

// BenchmarkGroup is a decision's count at 5,000 nodes in 10 pools and 3
// zones: from the tallies, and by the walk they replace.
func BenchmarkGroup(b *testing.B) {
	resolver := backends.Pools("pool")
	rng := rand.New(rand.NewPCG(1, 1))
	nodes := map[string]*corev1.Node{}
	c := New(resolver, false)
	for i := range 5000 {
		n := randomNode(rng, fmt.Sprint("n", i))
		n.Labels["pool"] = fmt.Sprint("p", i%10)
		delete(n.Annotations, clusterapi.MachineAnnotation)
		nodes[n.Name] = n
		c.Upsert(n)
	}
	set := policies(b, false)
	self := nodes["n42"]
	p := resolver.Of(self, nil)
	zone := self.Labels[pool.ZoneLabel]
	b.Run("tallies", func(b *testing.B) {
		for b.Loop() {
			c.Group(self, p, zone, set, nil)
		}
	})
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			walk(nodes, self, resolver, p, zone, set, nil)
		}
	})
}
