// Package backend hands a drained node to whatever replaces it. A backend
// resolves the one object whose deletion removes and replaces the node (a
// Karpenter NodeClaim, a Cluster API Machine, or the Node itself) and deletes
// it exactly once.
//
// Every backend is listed once, in pkg/repair/backend/backends.Table: a new
// backend is its own package and one line there. A backend brings all its
// engine's knowledge: which nodes it owns, what replaces them, how its
// nodes are pooled for the gate, and what the controller must watch for
// that.
//
// The engines' Go types are never imported: objects are addressed by group,
// kind and name through metadata-only requests, which work for any CRD
// version the cluster serves.
package backend

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Backend names.
const (
	Karpenter  = "karpenter"
	ClusterAPI = "clusterapi"
	Node       = "node"
)

// Target is the object whose deletion replaces a node. It is recorded in
// the node's repair record before it is deleted, so that a new leader
// deletes the same object, and only once.
type Target = v1alpha1.RepairTarget

// ErrNoTarget is wrapped by Resolve errors that mean the node's owner does
// not exist (as opposed to a failed request): the repair cannot proceed
// until someone looks.
var ErrNoTarget = errors.New("no object to delete for this node")

// Backend resolves the object to delete for a node.
type Backend interface {
	Name() string
	// Owns reports whether node belongs to this backend's engine, judged
	// from the node alone (owner references, labels, annotations).
	Owns(node *corev1.Node) bool
	// Engine reports whether deleting the target gets the node a new
	// machine (an engine replaces it); false for the Node itself, whose
	// machine keeps running.
	Engine() bool
	// Resolve finds the object whose deletion replaces node. An error means
	// the node cannot be handed over (its owner is missing).
	Resolve(ctx context.Context, node *corev1.Node) (Target, error)
	// Engine's pools: PoolOf is the node's pool in the engine's grouping,
	// for the safety gate, and NeedsLookup says when it depends on a
	// watched object (pkg/repair/pool).
	pool.Engine
	// Watches are the kinds whose objects PoolOf looks up: the controller
	// watches them, metadata only, where the cluster serves them. None:
	// the node alone decides its pool.
	Watches() []schema.GroupKind
}

// Registry is every backend, in the order ownership is tried; the last one
// should own every node.
type Registry []Backend

// Names lists the backends' names in order.
func (r Registry) Names() []string {
	out := make([]string, len(r))
	for i, b := range r {
		out[i] = b.Name()
	}
	return out
}

// Get returns the backend called name.
func (r Registry) Get(name string) (Backend, bool) {
	for _, b := range r {
		if b.Name() == name {
			return b, true
		}
	}
	return nil, false
}

// CheckOverride accepts "" (choose per node) or a backend's name.
func (r Registry) CheckOverride(name string) error {
	if _, ok := r.Get(name); ok || name == "" {
		return nil
	}
	return fmt.Errorf("unknown backend %q: want one of %v, or empty to choose per node", name, r.Names())
}

// Choose picks the first backend that owns node: a Karpenter NodeClaim
// (owner reference or NodePool label), a Cluster API Machine (annotation),
// otherwise the Node itself. A known override wins. Nil only when no
// backend owns node and the override is unknown.
func (r Registry) Choose(node *corev1.Node, override string) Backend {
	if b, ok := r.Get(override); ok {
		return b
	}
	for _, b := range r {
		if b.Owns(node) {
			return b
		}
	}
	return nil
}

// Meta returns an addressable metadata-only object for t.
func Meta(t Target) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.APIVersion, m.Kind = t.APIVersion, t.Kind
	m.Namespace, m.Name = t.Namespace, t.Name
	return m
}

// Outcome of DeleteOnce.
type Outcome string

const (
	// Deleted: this call deleted the target.
	Deleted Outcome = "Deleted"
	// AlreadyDeleting: the target has a deletion timestamp (its finalizers
	// run), so it was not deleted again.
	AlreadyDeleting Outcome = "AlreadyDeleting"
	// Gone: the target, or at least the one with the recorded UID, no
	// longer exists.
	Gone Outcome = "Gone"
)

// DeleteOnce deletes t unless it is already gone or being deleted. The UID
// precondition makes sure that an object recreated under the same name is
// never deleted in its place. r must read from the API server, not from a
// cache: a stale cache would have the object deleted a second time.
func DeleteOnce(ctx context.Context, r client.Reader, c client.Writer, t Target) (Outcome, error) {
	cur := Meta(t)
	if err := r.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Name}, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return Gone, nil
		}
		return "", fmt.Errorf("reading %s: %w", t, err)
	}
	return DeleteSeen(ctx, c, t, cur)
}

// DeleteSeen is DeleteOnce for a caller that holds the target as the API
// server returned it just now (the response to its own write), which saves
// the read. A cached copy is not enough, for the reason DeleteOnce gives.
func DeleteSeen(ctx context.Context, c client.Writer, t Target, cur metav1.Object) (Outcome, error) {
	if t.UID != "" && cur.GetUID() != t.UID {
		return Gone, nil
	}
	if cur.GetDeletionTimestamp() != nil {
		return AlreadyDeleting, nil
	}
	uid := cur.GetUID()
	// Deleted as unstructured: controller-runtime's client deletes
	// metadata-only objects through the typed client, which needs the kind
	// in its scheme.
	del := &unstructured.Unstructured{}
	del.SetAPIVersion(t.APIVersion)
	del.SetKind(t.Kind)
	del.SetNamespace(t.Namespace)
	del.SetName(t.Name)
	err := c.Delete(ctx, del, client.Preconditions{UID: &uid})
	switch {
	case err == nil:
		return Deleted, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return Gone, nil
	default:
		return "", fmt.Errorf("deleting %s: %w", t, err)
	}
}
