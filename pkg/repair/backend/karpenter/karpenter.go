// Package karpenter is the backend for Karpenter nodes: it deletes the
// node's NodeClaim. Karpenter's termination controller then drains what is
// left, terminates the instance, removes the Node, and its provisioner
// launches capacity for the displaced pods.
//
// Karpenter's own node repair (feature gate NodeRepair) must be off for the
// nodes nodemend repairs, or both would act on the same conditions.
package karpenter

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Karpenter's public API that nodemend reads (never writes).
const (
	// NodePoolLabel names a Karpenter node's NodePool.
	NodePoolLabel = "karpenter.sh/nodepool"
	// Group is the API group of NodePool and NodeClaim.
	Group = "karpenter.sh"
)

// Backend resolves NodeClaims.
type Backend struct {
	// Reader reads NodeClaims (uncached: they are looked up once per repair).
	Reader client.Reader
}

// Name is backend.Karpenter.
func (Backend) Name() string { return backend.Karpenter }

// Engine is true: Karpenter replaces the machine of a deleted NodeClaim.
func (Backend) Engine() bool { return true }

// Owns: a NodeClaim owns node, or node carries a NodePool label (a node
// Karpenter has not registered yet has no owner reference).
func (Backend) Owns(node *corev1.Node) bool {
	for _, o := range node.OwnerReferences {
		if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && gv.Group == Group && o.Kind == "NodeClaim" {
			return true
		}
	}
	return node.Labels[NodePoolLabel] != ""
}

// PoolOf: a Karpenter node's pool is its NodePool, named by its label.
func (Backend) PoolOf(node *corev1.Node, _ pool.MachineLookup) (pool.Pool, bool) {
	if np := node.Labels[NodePoolLabel]; np != "" {
		return pool.Pool{Group: Group, Kind: "NodePool", Name: np}, true
	}
	return pool.Pool{}, false
}

// NeedsLookup is false: the label is on the node.
func (Backend) NeedsLookup(*corev1.Node) bool { return false }

// Watches nothing: the pool is on the node, and NodeClaims are read once
// per repair, uncached.
func (Backend) Watches() []schema.GroupKind { return nil }

// Resolve returns the NodeClaim of n: the owner reference Karpenter sets on
// registered nodes, or else the NodeClaim whose status names the node (by
// name or provider ID).
func (b Backend) Resolve(ctx context.Context, n *corev1.Node) (backend.Target, error) {
	for _, o := range n.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil || gv.Group != Group || o.Kind != "NodeClaim" {
			continue
		}
		return backend.Target{Backend: backend.Karpenter, APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID}, nil
	}
	// A node not yet registered by Karpenter has no owner reference. The
	// list is rare (once per such repair) and uncached.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: Group, Version: "v1", Kind: "NodeClaimList"})
	if err := b.Reader.List(ctx, list); err != nil {
		return backend.Target{}, fmt.Errorf("listing NodeClaims: %w", err)
	}
	for _, nc := range list.Items {
		nodeName, _, _ := unstructured.NestedString(nc.Object, "status", "nodeName")
		providerID, _, _ := unstructured.NestedString(nc.Object, "status", "providerID")
		if nodeName == n.Name || (providerID != "" && providerID == n.Spec.ProviderID) {
			return backend.Target{Backend: backend.Karpenter, APIVersion: nc.GetAPIVersion(), Kind: "NodeClaim", Name: nc.GetName(), UID: nc.GetUID()}, nil
		}
	}
	return backend.Target{}, fmt.Errorf("node %s has no NodeClaim (no owner reference, no NodeClaim status names it): %w", n.Name, backend.ErrNoTarget)
}
