package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
		members, err := r.members(ctx, set, lookup)
		if err != nil {
			return gate.Decision{}, group{}, err
		}
		in.Pool, in.Zone = gate.Tally(members, g.pool.String(), g.zone)
	}
	return gate.Decide(in), g, nil
}

// members lists every node as the gate counts it: its pool, its zone, and
// whether it is unhealthy under its own policy (tolerated or not) or under
// repair.
func (r *Reconciler) members(ctx context.Context, set *policy.Set, lookup pool.MachineLookup) ([]gate.Member, error) {
	nodes := &corev1.NodeList{}
	// Read-only walk over the cache: no deep copy of thousands of nodes.
	if err := r.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]gate.Member, 0, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		out = append(out, gate.Member{
			Pool:      r.pools.Of(n, lookup).String(),
			Zone:      n.Labels[pool.ZoneLabel],
			Unhealthy: countsUnhealthy(n, set),
		})
	}
	return out, nil
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
	idx := make(map[string]pool.Machine, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		idx[m.Namespace+"/"+m.Name] = pool.Machine{Labels: m.Labels, Owner: metav1.GetControllerOf(m)}
	}
	return func(ns, name string) (pool.Machine, bool) {
		m, ok := idx[ns+"/"+name]
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
	set, err := r.policies(ctx)
	if err != nil {
		return nil
	}
	lookup, _ := r.machineLookup(ctx)
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []metrics.FleetNode
	for i := range nodes.Items {
		n := &nodes.Items[i]
		rules := set.For(n.Labels).Rules
		p := ""
		seen := map[corev1.NodeConditionType]bool{}
		for _, c := range n.Status.Conditions {
			for _, rule := range rules {
				if seen[c.Type] || policy.IsPressure(rule.Type) || !rule.Matches(c) {
					continue
				}
				if p == "" {
					p = r.pools.Of(n, lookup).String()
				}
				seen[c.Type] = true
				out = append(out, metrics.FleetNode{Pool: p, Condition: string(c.Type)})
			}
		}
		if len(seen) == 0 && n.Annotations[workflow.PhaseAnnotation] != "" {
			out = append(out, metrics.FleetNode{Pool: r.pools.Of(n, lookup).String(), Condition: "InRepair"})
		}
	}
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
