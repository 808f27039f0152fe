package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/metrics"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
	"nodemend.dev/nodemend/pkg/repair/workflow"
)

// group is where a node is counted: its pool and its zone ("" for none).
type group struct {
	pool pool.Pool
	zone string
}

func (g group) zoneKey() string { return "zone/" + g.zone }

// decide runs the gates for a node whose toleration has passed. The fleet is
// counted from the cache at the moment of the decision.
func (r *Reconciler) decide(ctx context.Context, node *corev1.Node, st workflow.State, pol policy.Policy, set *policy.Set, now time.Time) (gate.Decision, group, error) {
	in := gate.Input{Vetoed: st.Vetoed, Veto: st.Veto, MaxUnhealthy: pol.MaxUnhealthy}
	var err error
	if in.Paused, in.PauseReason, err = r.paused(ctx); err != nil {
		return gate.Decision{}, group{}, err
	}
	lookup, err := r.machineLookup(ctx)
	if err != nil {
		return gate.Decision{}, group{}, err
	}
	g := group{pool: r.pools.Of(node, lookup), zone: node.Labels[pool.ZoneLabel]}
	if !in.Vetoed && !in.Paused {
		in.Pool, in.Zone, err = r.count(ctx, g, set, lookup)
		if err != nil {
			return gate.Decision{}, group{}, err
		}
	}
	return gate.Decide(in), g, nil
}

// count walks the fleet once and counts the nodes of g's pool and zone, and
// how many of them are unhealthy under their own policy (tolerated or not)
// or under repair.
func (r *Reconciler) count(ctx context.Context, g group, set *policy.Set, lookup pool.MachineLookup) (gate.Group, *gate.Group, error) {
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
		u := countsUnhealthy(n, set)
		if inPool {
			p.Add(u)
		}
		if inZone {
			z.Add(u)
		}
	})
	return p, z, err
}

// eachNode calls f for every cached node, read-only. The gate walks the
// whole fleet for each decision, so it reads the informer's store directly
// rather than copying thousands of nodes into a list.
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

func countsUnhealthy(n *corev1.Node, set *policy.Set) bool {
	if n.Annotations[workflow.PhaseAnnotation] != "" {
		return true
	}
	return unhealthy.Any(n.Status.Conditions, set.For(n.Labels).Rules)
}

// machineLookup indexes the cached Cluster API Machines (metadata only);
// nil when Cluster API is not installed.
func (r *Reconciler) machineLookup(ctx context.Context) (pool.MachineLookup, error) {
	if r.machineGVK.Empty() {
		return nil, nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.machineGVK.GroupVersion().WithKind("MachineList"))
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	idx := make(map[types.NamespacedName]pool.Machine, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		idx[types.NamespacedName{Namespace: m.Namespace, Name: m.Name}] = pool.Machine{Labels: m.Labels, Owner: metav1.GetControllerOf(m)}
	}
	return func(ns, name string) (pool.Machine, bool) {
		m, ok := idx[types.NamespacedName{Namespace: ns, Name: name}]
		return m, ok
	}, nil
}

// block reports a blocked repair: once per node and blocking reason on the
// node, once per blocked episode on the pool object where there is one.
func (r *Reconciler) block(ctx context.Context, node *corev1.Node, d gate.Decision, g group) {
	key := string(d.Gate)
	switch d.Gate {
	case gate.Pool:
		key += "/" + g.pool.String()
	case gate.Zone:
		key += "/" + g.zone
	}
	if r.notifyOnce(node.Name, EventBlocked, key) {
		ctrl.LoggerFrom(ctx).Info("repair blocked", "gate", d.Gate, "reason", d.Message)
		r.metrics.Blocked(string(d.Gate))
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventBlocked, "Gate", "%s; re-checking every %s", d.Message, r.opts.RecheckInterval)
	}
	var where string
	switch d.Gate {
	case gate.Pool:
		where = g.pool.String()
	case gate.Zone:
		where = g.zoneKey()
	default:
		return // veto and pause are not about a pool
	}
	r.mu.Lock()
	r.blocked[node.Name] = blockedAt{where: where, gate: d.Gate}
	first := d.Gate == gate.Pool && g.pool.HasObject() && !r.poolNotified[where]
	if first {
		r.poolNotified[where] = true
	}
	r.mu.Unlock()
	if first {
		r.poolEvent(ctx, g.pool, d.Message)
	}
}

// unblock forgets that a node was blocked (it passed the gates, recovered,
// or is gone). A pool stays blocked while any of its nodes is; the event on
// the pool object is emitted again for the next blocked episode.
func (r *Reconciler) unblock(node string) {
	r.clearNotified(node, EventBlocked)
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.blocked[node]
	if !ok {
		return
	}
	delete(r.blocked, node)
	for _, other := range r.blocked {
		if other.where == b.where {
			return
		}
	}
	delete(r.poolNotified, b.where)
}

// poolEvent emits NodeRepairBlocked on the pool's object (NodePool,
// MachineDeployment, MachineSet) if it exists.
func (r *Reconciler) poolEvent(ctx context.Context, p pool.Pool, msg string) {
	mapping, err := r.mapper.RESTMapping(schema.GroupKind{Group: p.Group, Kind: p.Kind})
	if err != nil {
		return
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, m); err != nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: mapping.GroupVersionKind.GroupVersion().String(), Kind: p.Kind,
		Namespace: p.Namespace, Name: p.Name, UID: m.UID}
	r.recorder.Eventf(ref, nil, corev1.EventTypeWarning, EventBlocked, "Gate", "%s; re-checking every %s", msg, r.opts.RecheckInterval)
}

// fleetView computes the fleet gauges from the cache at scrape time.
type fleetView struct {
	r   *Reconciler
	ctx context.Context
}

func (f fleetView) Unhealthy() []metrics.FleetNode {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	r := f.r
	set, err := r.policies(ctx, false) // scrapes also run on replicas that do not lead
	if err != nil {
		return nil
	}
	lookup, _ := r.machineLookup(ctx)
	var out []metrics.FleetNode
	_ = r.eachNode(ctx, func(n *corev1.Node) {
		rules := set.For(n.Labels).Rules
		p := ""
		var seen []corev1.NodeConditionType
		for _, c := range n.Status.Conditions {
			for _, rule := range rules {
				if slices.Contains(seen, c.Type) || policy.IsPressure(rule.Type) || !rule.Matches(c) {
					continue
				}
				if p == "" {
					p = r.pools.Of(n, lookup).String()
				}
				seen = append(seen, c.Type)
				out = append(out, metrics.FleetNode{Pool: p, Condition: string(c.Type)})
			}
		}
		if len(seen) == 0 && n.Annotations[workflow.PhaseAnnotation] != "" {
			out = append(out, metrics.FleetNode{Pool: r.pools.Of(n, lookup).String(), Condition: "InRepair"})
		}
	})
	return out
}

func (f fleetView) Blocked() map[string]string {
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for _, b := range r.blocked {
		out[b.where] = string(b.gate)
	}
	return out
}

func (f fleetView) Paused() bool {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	p, _, _ := f.r.paused(ctx)
	return p
}
