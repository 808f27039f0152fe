// Package pool decides which pool a node belongs to, for the safety gate: the
// engine's grouping of interchangeable nodes (a Karpenter NodePool, a Cluster
// API MachineDeployment or MachineSet), a label the operator configures, or,
// for nodes in no pool, the cluster group. It is pure: Cluster API Machines
// are looked up through a function the caller provides.
package pool

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Well-known labels and annotations of the engines. These are the engines'
// public API; we read them, never write them.
const (
	// KarpenterNodePoolLabel names a Karpenter node's NodePool.
	KarpenterNodePoolLabel = "karpenter.sh/nodepool"
	// KarpenterGroup is the API group of NodePool and NodeClaim.
	KarpenterGroup = "karpenter.sh"

	// ClusterAPIGroup is the API group of Machine, MachineSet and
	// MachineDeployment.
	ClusterAPIGroup = "cluster.x-k8s.io"
	// MachineAnnotation names the Machine of a Cluster API node.
	MachineAnnotation = "cluster.x-k8s.io/machine"
	// ClusterNamespaceAnnotation is the namespace of that Machine.
	ClusterNamespaceAnnotation = "cluster.x-k8s.io/cluster-namespace"
	// OwnerKindAnnotation and OwnerNameAnnotation name the Machine's owner
	// (usually a MachineSet), set on the node by Cluster API.
	OwnerKindAnnotation = "cluster.x-k8s.io/owner-kind"
	OwnerNameAnnotation = "cluster.x-k8s.io/owner-name"
	// MachineDeploymentLabel and MachineSetLabel are set on Machines created
	// through a MachineDeployment / MachineSet.
	MachineDeploymentLabel = "cluster.x-k8s.io/deployment-name"
	MachineSetLabel        = "cluster.x-k8s.io/set-name"

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

// Resolver assigns pools.
type Resolver struct {
	// Label, when set, is a node label whose value names the pool. It takes
	// precedence over the engines: an operator who sets it means it.
	Label string
}

// MachineOf returns the namespace and name of a Cluster API node's Machine.
func MachineOf(node *corev1.Node) (namespace, name string, ok bool) {
	name = node.Annotations[MachineAnnotation]
	if name == "" {
		return "", "", false
	}
	return node.Annotations[ClusterNamespaceAnnotation], name, true
}

// NeedsMachine reports whether Of's answer for node depends on its Cluster
// API Machine: the node names one, and neither the pool label nor a NodePool
// claims it first. Every other node's pool follows from the node alone.
func (r Resolver) NeedsMachine(node *corev1.Node) bool {
	if r.Label != "" && node.Labels[r.Label] != "" {
		return false
	}
	if node.Labels[KarpenterNodePoolLabel] != "" {
		return false
	}
	_, _, ok := MachineOf(node)
	return ok
}

// Of returns the pool of node. machines may be nil when Cluster API is not
// installed. It allocates nothing: the gate calls it for every node.
func (r Resolver) Of(node *corev1.Node, machines MachineLookup) Pool {
	if r.Label != "" {
		if v, ok := node.Labels[r.Label]; ok && v != "" {
			return Pool{Kind: KindLabel, Label: r.Label, Name: v}
		}
	}
	if np := node.Labels[KarpenterNodePoolLabel]; np != "" {
		return Pool{Group: KarpenterGroup, Kind: "NodePool", Name: np}
	}
	if ns, name, ok := MachineOf(node); ok {
		if machines != nil {
			if m, found := machines(ns, name); found {
				if md := m.Labels[MachineDeploymentLabel]; md != "" {
					return Pool{Group: ClusterAPIGroup, Kind: "MachineDeployment", Namespace: ns, Name: md}
				}
				if ms := m.Labels[MachineSetLabel]; ms != "" {
					return Pool{Group: ClusterAPIGroup, Kind: "MachineSet", Namespace: ns, Name: ms}
				}
				if o := m.Owner; o != nil {
					return Pool{Group: groupOf(o.APIVersion), Kind: o.Kind, Namespace: ns, Name: o.Name}
				}
			}
		}
		// The Machine is not (yet) in the cache: Cluster API also writes
		// the owner on the node.
		if kind, owner := node.Annotations[OwnerKindAnnotation], node.Annotations[OwnerNameAnnotation]; kind != "" && owner != "" {
			group := ClusterAPIGroup
			if kind != "MachineSet" && kind != "MachineDeployment" {
				group = "" // e.g. a control plane provider's kind: no object we can address safely
			}
			return Pool{Group: group, Kind: kind, Namespace: ns, Name: owner}
		}
	}
	return Cluster
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}
