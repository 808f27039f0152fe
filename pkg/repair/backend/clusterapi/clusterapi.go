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
	_, _, ok := pool.MachineOf(node)
	return ok
}

// Resolve returns the Machine named by the node's annotations, checking that
// it exists, in the version the cluster prefers.
func (b Backend) Resolve(ctx context.Context, n *corev1.Node) (backend.Target, error) {
	ns, name, ok := pool.MachineOf(n)
	if !ok {
		return backend.Target{}, fmt.Errorf("node %s has no %s annotation: %w", n.Name, pool.MachineAnnotation, backend.ErrNoTarget)
	}
	mapping, err := b.Mapper.RESTMapping(schema.GroupKind{Group: pool.ClusterAPIGroup, Kind: "Machine"})
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
