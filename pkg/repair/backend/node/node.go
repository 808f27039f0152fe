// Package node is the backend for nodes that no engine owns (bare metal,
// kwok, simulation): the Node object itself is deleted. Whatever provisions
// the machine is expected to register it again or replace it.
package node

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Backend deletes the Node object.
type Backend struct{}

// Name is backend.Node.
func (Backend) Name() string { return backend.Node }

// Engine is false: the machine of a deleted Node keeps running.
func (Backend) Engine() bool { return false }

// Owns every node: it is the fallback, listed last.
func (Backend) Owns(*corev1.Node) bool { return true }

// Resolve returns the node itself.
func (Backend) Resolve(_ context.Context, n *corev1.Node) (backend.Target, error) {
	return backend.Target{Backend: backend.Node, APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, nil
}

// PoolOf pools nothing: a node no engine owns counts in the configured
// label's pool or the cluster group.
func (Backend) PoolOf(*corev1.Node, pool.MachineLookup) (pool.Pool, bool) { return pool.Pool{}, false }

// NeedsLookup is false: nothing is looked up.
func (Backend) NeedsLookup(*corev1.Node) bool { return false }

// Watches nothing.
func (Backend) Watches() []schema.GroupKind { return nil }
