package fleetcount

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// TestEventsAndDecisionsAtOnce: the informer's handler and the workers'
// decisions run on different goroutines, and decisions under two policy
// sets alternate (re-evaluating the fleet each time), so this is one to run
// with -race; after the events stop, the tallies equal the walk under
// either set.
func TestEventsAndDecisionsAtOnce(t *testing.T) {
	resolver := backends.Pools("pool")
	c := New(resolver, false)
	h := c.Handler()
	sets := []*policy.Set{policies(t, false), policies(t, true)}
	final := make(chan map[string]*corev1.Node)
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		nodes := map[string]*corev1.Node{}
		for range 3000 {
			name := fmt.Sprint("n", rng.IntN(60))
			old, ok := nodes[name]
			switch {
			case ok && rng.IntN(6) == 0:
				delete(nodes, name)
				h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: name, Obj: old})
			case ok:
				n := randomNode(rng, name)
				nodes[name] = n
				h.OnUpdate(old, n)
			default:
				n := randomNode(rng, name)
				nodes[name] = n
				h.OnAdd(n, false)
			}
		}
		final <- nodes
	}()
	self := randomNode(rand.New(rand.NewPCG(5, 6)), "self")
	p, zone := resolver.Of(self, nil), self.Labels[pool.ZoneLabel]
	var nodes map[string]*corev1.Node
	for i := 0; nodes == nil; i++ {
		c.Group(self, p, zone, sets[i%2], nil)
		select {
		case nodes = <-final:
		default:
		}
	}
	for _, set := range sets {
		for _, n := range nodes {
			np, nz := resolver.Of(n, nil), n.Labels[pool.ZoneLabel]
			wantP, wantZ := walk(nodes, n, resolver, np, nz, set, nil)
			gotP, gotZ := c.Group(n, np, nz, set, nil)
			if gotP != wantP || (gotZ == nil) != (wantZ == nil) || (gotZ != nil && *gotZ != *wantZ) {
				t.Fatalf("deciding %s: tallies %+v %+v, walk %+v %+v", n.Name, gotP, gotZ, wantP, wantZ)
			}
		}
	}
}
