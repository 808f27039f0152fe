// Package clusterapi is the backend for Cluster API nodes: it deletes the
// node's Machine. Cluster API drains and deletes the node and its
// infrastructure, and the owning MachineSet creates a replacement.
//
// A MachineHealthCheck that covers the same nodes would race with nodemend:
// use one or the other for a given set of machines.
package clusterapi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Cluster API's labels and annotations, its public API: nodemend reads
// them, never writes them.
const (
	// Group is the API group of Machine, MachineSet and MachineDeployment.
	Group = "cluster.x-k8s.io"
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
)

// MachineOf returns the namespace and name of a Cluster API node's Machine.
func MachineOf(node *corev1.Node) (namespace, name string, ok bool) {
	name = node.Annotations[MachineAnnotation]
	if name == "" {
		return "", "", false
	}
	return node.Annotations[ClusterNamespaceAnnotation], name, true
}

// Backend resolves Machines.
type Backend struct {
	Reader client.Reader
	Mapper meta.RESTMapper
}

// Name is backend.ClusterAPI.
func (Backend) Name() string { return backend.ClusterAPI }

// Engine is true: the owning MachineSet replaces a deleted Machine.
func (Backend) Engine() bool { return true }

// Owns: node carries Cluster API's Machine annotations.
func (Backend) Owns(node *corev1.Node) bool {
	_, _, ok := MachineOf(node)
	return ok
}

// PoolOf: a Cluster API node's pool is its Machine's MachineDeployment,
// else its MachineSet, else its controller owner (a control plane
// provider's kind), read from the watched Machine; a Machine not (yet) in
// the cache falls back to the owner Cluster API writes on the node.
func (Backend) PoolOf(node *corev1.Node, machines pool.MachineLookup) (pool.Pool, bool) {
	ns, name, ok := MachineOf(node)
	if !ok {
		return pool.Pool{}, false
	}
	if machines != nil {
		if m, found := machines(ns, name); found {
			if md := m.Labels[MachineDeploymentLabel]; md != "" {
				return pool.Pool{Group: Group, Kind: "MachineDeployment", Namespace: ns, Name: md}, true
			}
			if ms := m.Labels[MachineSetLabel]; ms != "" {
				return pool.Pool{Group: Group, Kind: "MachineSet", Namespace: ns, Name: ms}, true
			}
			if o := m.Owner; o != nil {
				return pool.Pool{Group: groupOf(o.APIVersion), Kind: o.Kind, Namespace: ns, Name: o.Name}, true
			}
		}
	}
	if kind, owner := node.Annotations[OwnerKindAnnotation], node.Annotations[OwnerNameAnnotation]; kind != "" && owner != "" {
		group := Group
		if kind != "MachineSet" && kind != "MachineDeployment" {
			group = "" // e.g. a control plane provider's kind: no object we can address safely
		}
		return pool.Pool{Group: group, Kind: kind, Namespace: ns, Name: owner}, true
	}
	return pool.Pool{}, false
}

// NeedsLookup: a node that names a Machine is pooled by that Machine,
// which changes apart from the node.
func (Backend) NeedsLookup(node *corev1.Node) bool {
	_, _, ok := MachineOf(node)
	return ok
}

// Watches Machines (metadata only, when Cluster API is served), so that
// PoolOf's lookups read a synced cache.
func (Backend) Watches() []schema.GroupKind {
	return []schema.GroupKind{{Group: Group, Kind: "Machine"}}
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// Resolve returns the Machine named by the node's annotations, checking that
// it exists, in the version the cluster prefers.
func (b Backend) Resolve(ctx context.Context, n *corev1.Node) (backend.Target, error) {
	ns, name, ok := MachineOf(n)
	if !ok {
		return backend.Target{}, fmt.Errorf("node %s has no %s annotation: %w", n.Name, MachineAnnotation, backend.ErrNoTarget)
	}
	mapping, err := b.Mapper.RESTMapping(schema.GroupKind{Group: Group, Kind: "Machine"})
	if err != nil {
		return backend.Target{}, fmt.Errorf("Cluster API Machines are not served (%v): %w", err, backend.ErrNoTarget)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := b.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return backend.Target{}, fmt.Errorf("Machine %s/%s of node %s does not exist: %w", ns, name, n.Name, backend.ErrNoTarget)
		}
		return backend.Target{}, fmt.Errorf("reading Machine %s/%s of node %s: %w", ns, name, n.Name, err)
	}
	return backend.Target{Backend: backend.ClusterAPI, APIVersion: mapping.GroupVersionKind.GroupVersion().String(), Kind: "Machine",
		Namespace: ns, Name: name, UID: m.UID}, nil
}
