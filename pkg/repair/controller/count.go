package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/fleetcount"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Counting a decision's fleet: the tallies, or the cache walked before
// they have synced, and the objects the backends pool nodes by.

// count counts the nodes of g's pool and zone, and how many of them are
// unhealthy under their own policy (tolerated or not) or under repair, from
// the tallies the Node informer's events keep (pkg/repair/fleetcount), with
// node as this decision read it. Before the tallies have counted the
// informer's initial nodes, the cache is walked instead.
func (r *Reconciler) count(ctx context.Context, node *corev1.Node, g group, set *policy.Set, lookup pool.MachineLookup) (gate.Group, *gate.Group, error) {
	if r.counts != nil && r.countsSynced() {
		p, z := r.counts.Group(node, g.pool, g.zone, set, lookup)
		return p, z, nil
	}
	return r.walk(ctx, g, set, lookup)
}

// walk counts g's pool and zone by visiting every cached node: the count
// before the tallies have synced, and the reference they are tested against.
func (r *Reconciler) walk(ctx context.Context, g group, set *policy.Set, lookup pool.MachineLookup) (gate.Group, *gate.Group, error) {
	p := gate.Group{Name: g.pool.String()}
	var z *gate.Group
	if g.zone != "" {
		z = &gate.Group{Name: g.zone}
	}
	err := r.eachNode(ctx, func(n *corev1.Node) {
		inPool := r.pools.Of(n, lookup) == g.pool
		inZone := z != nil && n.Labels[pool.ZoneLabel] == g.zone
		if !inPool && !inZone {
			return
		}
		u := fleetcount.Unhealthy(n, set)
		if inPool {
			p.Add(u)
		}
		if inZone {
			z.Add(u)
		}
	})
	return p, z, err
}

// eachNode calls f for every cached node, read-only, reading the informer's
// store directly rather than copying thousands of nodes into a list.
func (r *Reconciler) eachNode(ctx context.Context, f func(*corev1.Node)) error {
	if r.nodeStore != nil {
		for _, o := range r.nodeStore.List() {
			if n, ok := o.(*corev1.Node); ok {
				f(n)
			}
		}
		return nil
	}
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	for i := range nodes.Items {
		f(&nodes.Items[i])
	}
	return nil
}

// machineLookup indexes the cached objects the backends pool nodes by
// (metadata only; Cluster API Machines); nil when none is watched. The
// index is by namespace and name, as pool.MachineLookup asks: the one
// watched kind today is Machine.
func (r *Reconciler) machineLookup(ctx context.Context) (pool.MachineLookup, error) {
	if len(r.watched) == 0 {
		return nil, nil
	}
	lists, size := make([]*metav1.PartialObjectMetadataList, len(r.watched)), 0
	for i, gvk := range r.watched {
		lists[i] = &metav1.PartialObjectMetadataList{}
		lists[i].SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.client.List(ctx, lists[i], client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		size += len(lists[i].Items)
	}
	idx := make(map[types.NamespacedName]pool.Machine, size)
	for _, list := range lists {
		for i := range list.Items {
			m := &list.Items[i]
			idx[types.NamespacedName{Namespace: m.Namespace, Name: m.Name}] = pool.Machine{Labels: m.Labels, Owner: metav1.GetControllerOf(m)}
		}
	}
	return func(ns, name string) (pool.Machine, bool) {
		m, ok := idx[types.NamespacedName{Namespace: ns, Name: name}]
		return m, ok
	}, nil
}
