// Package pool decides which pool a node belongs to, for the safety gate: a
// label the operator configures, else the grouping of the engine that owns
// the node (each backend knows its own: a Karpenter NodePool, a Cluster API
// MachineDeployment or MachineSet, pkg/repair/backend/<name>), or, for nodes
// in no pool, the cluster group. It is pure: objects an engine's grouping
// depends on (Cluster API Machines) are looked up through a function the
// caller provides.
package pool

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Well-known labels and annotations of the engines. These are the engines'
// public API; we read them, never write them.
const (
	// ZoneLabel is the node's topology zone, for the zone gate.
	ZoneLabel = corev1.LabelTopologyZone
)

// Kinds of pool besides the engine kinds (NodePool, MachineDeployment,
// MachineSet, or any other owner kind Cluster API names).
const (
	KindLabel   = "Label"
	KindCluster = "Cluster"
)

// Pool identifies a group of nodes. The zero Pool is the cluster group.
type Pool struct {
	// Group is the API group of the pool object, empty for label and
	// cluster pools.
	Group     string
	Kind      string
	Namespace string
	// Name is the object's name, or for a label pool the label's value.
	Name string
	// Label is the label key of a label pool.
	Label string
}

// Cluster is the group of nodes in no pool.
var Cluster = Pool{Kind: KindCluster}

// String is a stable key, used in metrics and event messages.
func (p Pool) String() string {
	switch {
	case p.Kind == KindCluster || p.Kind == "":
		return "cluster"
	case p.Kind == KindLabel:
		return "label/" + p.Label + "=" + p.Name
	case p.Namespace != "":
		return p.Kind + "/" + p.Namespace + "/" + p.Name
	default:
		return p.Kind + "/" + p.Name
	}
}

// HasObject reports whether the pool is an API object that events can be
// emitted on.
func (p Pool) HasObject() bool { return p.Group != "" && p.Name != "" }

// Machine is what pool resolution needs from a Cluster API Machine: its
// labels and its controller owner.
type Machine struct {
	Labels map[string]string
	Owner  *metav1.OwnerReference
}

// MachineLookup finds a Machine by namespace and name.
type MachineLookup func(namespace, name string) (Machine, bool)

// Engine is a backend's knowledge of its engine's pools. Every backend is
// one (pkg/repair/backend.Backend); the Node backend pools nothing.
type Engine interface {
	// PoolOf is node's pool in the engine's grouping; ok is false when
	// the engine does not pool node. machines may be nil (nothing
	// watched). It must not allocate: the gate calls it for every node.
	PoolOf(node *corev1.Node, machines MachineLookup) (p Pool, ok bool)
	// NeedsLookup reports whether PoolOf's answer for node depends on an
	// object the engine watches (a Cluster API Machine), not the node
	// alone: such nodes are resolved at each decision.
	NeedsLookup(node *corev1.Node) bool
}

// Resolver assigns pools.
type Resolver struct {
	// Label, when set, is a node label whose value names the pool. It takes
	// precedence over the engines: an operator who sets it means it.
	Label string
	// Engines are asked in order (the backend table's,
	// pkg/repair/backend/backends.Pools); the first that pools a node
	// decides.
	Engines []Engine
}

// NeedsMachine reports whether Of's answer for node depends on an object an
// engine watches: the label does not name its pool, and no engine before
// the one that needs the lookup pools it from the node alone. Every other
// node's pool follows from the node alone.
func (r Resolver) NeedsMachine(node *corev1.Node) bool {
	if r.Label != "" && node.Labels[r.Label] != "" {
		return false
	}
	for _, e := range r.Engines {
		if e.NeedsLookup(node) {
			return true
		}
		if _, ok := e.PoolOf(node, nil); ok {
			return false
		}
	}
	return false
}

// Of returns the pool of node. machines may be nil when no engine's
// objects are watched. It allocates nothing: the gate calls it for every
// node.
func (r Resolver) Of(node *corev1.Node, machines MachineLookup) Pool {
	if r.Label != "" {
		if v, ok := node.Labels[r.Label]; ok && v != "" {
			return Pool{Kind: KindLabel, Label: r.Label, Name: v}
		}
	}
	for _, e := range r.Engines {
		if p, ok := e.PoolOf(node, machines); ok {
			return p
		}
	}
	return Cluster
}
