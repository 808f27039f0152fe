// Package fleetcount keeps what the pool and zone gates count — how many
// nodes each pool and zone has, and how many of them are unhealthy — up to
// date as the Node informer's events arrive, so that a decision reads two
// tallies instead of walking the fleet (a storm of 1,000 decisions on 5,000
// nodes walked 5 million nodes).
//
// A node's pool and zone come from the node alone (pool.Resolver), except
// for Cluster API nodes when Cluster API is installed: their pool is their
// Machine's, which changes apart from the node, so those nodes are kept aside
// and resolved at each decision, as the gate always did.
//
// Whether a node is unhealthy depends on the policies too. The tallies are
// valid for one compiled policy set; a decision with another set (a policy
// changed) re-evaluates every node once, under the lock, and the tallies
// follow the new set from then on.
package fleetcount

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/scheduled"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// Unhealthy is what the gate counts as unhealthy: a node under repair, or
// one that any rule of its own policy flags, tolerated or not.
func Unhealthy(n *corev1.Node, set *policy.Set) bool {
	if record.InRepair(n) || scheduled.Draining(n) {
		// A node drained ahead of a scheduled event is out of
		// service as much as one under repair.
		return true
	}
	return unhealthy.Any(n.Status.Conditions, set.For(n.Labels).Rules)
}

// Counts is the fleet's tallies. The zero value is not usable; see New.
type Counts struct {
	resolver pool.Resolver
	// clusterAPI: Cluster API is installed, so Machines decide the pool of
	// nodes that name one.
	clusterAPI bool

	mu sync.Mutex
	// set is the policy set the unhealthy bits were evaluated with.
	set   *policy.Set
	nodes map[string]entry
	pools map[pool.Pool]*tally
	zones map[string]*tally
	// byMachine are the nodes whose pool needs a Machine lookup.
	byMachine map[string]*corev1.Node
}

// entry is one node as last counted.
type entry struct {
	node *corev1.Node // the informer's object: read-only
	// byMachine: the pool needs a Machine lookup, so the node is in no
	// pool tally.
	byMachine bool
	pool      pool.Pool
	zone      string
	unhealthy bool
}

type tally struct{ size, unhealthy int }

// New returns empty tallies for nodes grouped by resolver; clusterAPI says
// whether Cluster API Machines are looked up.
func New(resolver pool.Resolver, clusterAPI bool) *Counts {
	return &Counts{resolver: resolver, clusterAPI: clusterAPI,
		nodes: map[string]entry{}, pools: map[pool.Pool]*tally{}, zones: map[string]*tally{}, byMachine: map[string]*corev1.Node{}}
}

// Handler is the informer event handler that keeps the tallies.
func (c *Counts) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.observe(o) },
		UpdateFunc: func(_, o any) { c.observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				c.Delete(n.Name)
			}
		},
	}
}

func (c *Counts) observe(o any) {
	if n, ok := o.(*corev1.Node); ok {
		c.Upsert(n)
	}
}

// Upsert counts n in place of what was counted for its name.
func (c *Counts) Upsert(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(n.Name)
	c.add(n)
}

// Delete uncounts the node called name.
func (c *Counts) Delete(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(name)
}

// Len is how many nodes are counted.
func (c *Counts) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

func (c *Counts) add(n *corev1.Node) {
	e := entry{node: n, zone: n.Labels[pool.ZoneLabel], unhealthy: Unhealthy(n, c.set)}
	if c.clusterAPI && c.resolver.NeedsMachine(n) {
		e.byMachine = true
		c.byMachine[n.Name] = n
	} else {
		e.pool = c.resolver.Of(n, nil)
		bump(c.pools, e.pool, e.unhealthy, 1)
	}
	if e.zone != "" {
		bump(c.zones, e.zone, e.unhealthy, 1)
	}
	c.nodes[n.Name] = e
}

func (c *Counts) remove(name string) {
	e, ok := c.nodes[name]
	if !ok {
		return
	}
	delete(c.nodes, name)
	delete(c.byMachine, name)
	if !e.byMachine {
		bump(c.pools, e.pool, e.unhealthy, -1)
	}
	if e.zone != "" {
		bump(c.zones, e.zone, e.unhealthy, -1)
	}
}

func bump[K comparable](m map[K]*tally, k K, unhealthy bool, by int) {
	t := m[k]
	if t == nil {
		t = &tally{}
		m[k] = t
	}
	t.size += by
	if unhealthy {
		t.unhealthy += by
	}
	if t.size == 0 {
		delete(m, k)
	}
}

// Group counts the pool p and the zone (nil for "") for a decision on self
// under set: self as the decision sees it (it may be newer than its last
// event), every other node as last observed. Nodes whose pool needs a
// Machine are resolved through machines, one by one.
func (c *Counts) Group(self *corev1.Node, p pool.Pool, zone string, set *policy.Set, machines pool.MachineLookup) (gate.Group, *gate.Group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if set != c.set {
		c.reevaluate(set)
	}
	pg := gate.Group{Name: p.String()}
	if t := c.pools[p]; t != nil {
		pg.Size, pg.Unhealthy = t.size, t.unhealthy
	}
	var zg *gate.Group
	if zone != "" {
		zg = &gate.Group{Name: zone}
		if t := c.zones[zone]; t != nil {
			zg.Size, zg.Unhealthy = t.size, t.unhealthy
		}
	}
	for name, n := range c.byMachine {
		if name != self.Name && c.resolver.Of(n, machines) == p {
			pg.Add(c.nodes[name].unhealthy)
		}
	}
	// Self replaces its own last observation.
	if old, ok := c.nodes[self.Name]; ok {
		if !old.byMachine && old.pool == p {
			pg.Size--
			if old.unhealthy {
				pg.Unhealthy--
			}
		}
		if zg != nil && old.zone == zone {
			zg.Size--
			if old.unhealthy {
				zg.Unhealthy--
			}
		}
	}
	u := Unhealthy(self, set)
	pg.Add(u)
	if zg != nil {
		zg.Add(u)
	}
	return pg, zg
}

// reevaluate recounts every node's unhealthy bit under set.
func (c *Counts) reevaluate(set *policy.Set) {
	c.set = set
	nodes := c.nodes
	c.nodes = make(map[string]entry, len(nodes))
	clear(c.byMachine)
	clear(c.pools)
	clear(c.zones)
	for _, e := range nodes {
		c.add(e.node)
	}
}
