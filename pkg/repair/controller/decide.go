package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// This file is where a repair is decided: a node not under repair is
// tolerated while its toleration runs, then the gates (pure, pkg/repair/gate)
// allow or block it on the fleet counted from the cache (count.go), the
// breaker meters it (meter.go), and an allowed repair starts (taint,
// recorded on the node in one patch).

// tolerate handles a node not under repair: record or clear its unhealthy
// period, wait for the toleration, pass the gates, start the repair.
func (r *Reconciler) tolerate(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, set *policy.Set, asmt unhealthy.Assessment, now time.Time) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	node, back, err := r.ladderWindow(ctx, node, &st, asmt, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !asmt.Unhealthy() {
		r.forget(ctx, node.Name)
		if st.Ladder != nil && now.Before(st.Ladder.Until.Time) {
			wakeAt(ctx, st.Ladder.Until.Time)
		}
		if len(st.Since) > 0 && !r.opts.DryRun {
			next := record.WithSince(st.Record, nil)
			if node, err = r.write(ctx, node, st.Record, next, false); err != nil {
				return reconcile.Result{}, err
			}
			st.Record = next
			log.Info("node recovered before its toleration passed", "unhealthySince", st.Since.String())
			r.emit(recoveredEvent(node, st.Since))
		}
		if st.RepairRequested {
			return reconcile.Result{}, r.refuseRepairNow(ctx, node, st, "no condition of the node is unhealthy under its policy "+pol.Name+
				"; nodemend repairs only on a condition its policy names")
		}
		return reconcile.Result{}, nil
	}
	if !r.opts.DryRun && !asmt.Since.Equal(st.Since) {
		next := record.WithSince(st.Record, asmt.Since)
		if node, err = r.write(ctx, node, st.Record, next, false); err != nil {
			return reconcile.Result{}, err
		}
		st.Record, st.Since = next, asmt.Since
		log.Info("node unhealthy", "unhealthySince", asmt.Since.String(), "policy", pol.Name, "expires", asmt.NextExpiry().UTC().Format(time.RFC3339))
	}
	if pol.Action == v1alpha1.ActionNone {
		if st.RepairRequested {
			if err := r.refuseRepairNow(ctx, node, st, "its policy "+pol.Name+" has the action None: its nodes are only counted"); err != nil {
				return reconcile.Result{}, err
			}
		}
		noWake(ctx)
		r.leaveBacklog(node.Name)
		if r.dedupe.first(node.Name, keyActionNone, pol.Name) {
			log.Info("node unhealthy; its policy's action is None, so it is only counted", "policy", pol.Name)
		}
		return reconcile.Result{}, nil
	}
	trigger, expired := asmt.Expired(now)
	if back != nil {
		// The fault an attempt had repaired is back within the rung's
		// window: the decision goes on at once, through the gates.
		trigger, expired = *back, true
	}
	var request *v1alpha1.RepairNowRequest
	if st.RepairRequested {
		// A person asks for the repair now: the toleration is waived,
		// nothing else (the gates and the ladder apply). The finding is
		// the evidence.
		if !expired {
			trigger, expired = asmt.Findings[0], true
		}
		request = record.RepairNowAt(st.RepairRequest, now)
	}
	if !expired {
		r.leaveBacklog(node.Name) // a policy's toleration grew: not due any more
		wakeAt(ctx, asmt.NextExpiry())
		return reconcile.Result{}, nil
	}
	d, grp, release, err := r.decide(ctx, node, st, pol, set, now)
	defer release()
	if err != nil {
		return reconcile.Result{}, err
	}
	if !r.opts.DryRun {
		// A dry run drains nothing, so it takes no drain slot and keeps
		// no backlog: it reports what the gates alone decide.
		d = r.meter(ctx, node.Name, grp, trigger, pol, d, now)
	}
	if !d.Allowed {
		r.block(ctx, node, d, grp)
		wakeAt(ctx, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	r.unblock(node.Name)
	if r.opts.DryRun {
		if r.emit(wouldStartEvent(node, trigger, pol, grp, d)) {
			log.Info("dry run: would start repair", "trigger", v1alpha1.TriggerOf(trigger.Condition).String(), "policy", pol.Name, "gate", d.Message)
		}
		wakeAt(ctx, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	rungs := r.rungsOf(node, pol, trigger.Condition.Reason)
	pos, continued := ladder.StartAt(rungs, st.Ladder, trigger.Condition.Type, now)
	attempt := attemptAt(rungs, pos, now)
	next := record.Start(st.Record, asmt.Since, trigger.Condition, pol.Name, attempt, now, request)
	started, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.Record, st.Since = next, asmt.Since
	r.metrics.Started(string(trigger.Rule.Type), trigger.Condition.Reason, now.Sub(trigger.Since))
	log.Info("repair started", "trigger", v1alpha1.TriggerOf(trigger.Condition).String(), "policy", pol.Name, "gate", d.Message,
		"rung", attempt.Action, "position", attempt.RungPosition.String(), "continued", continued, "requestedNow", request != nil)
	r.emitWithNextStep(node.Name, startedEvent(started, trigger, pol, grp, d, *next.Rung, len(rungs), request))
	r.track(started, st)
	r.breaker.Forget(node.Name)
	r.wakeHeads(grp.keys())
	// Decide first: the drain is a later reconcile, queued behind the
	// decisions already due, so that a storm's nodes are all tainted
	// before any worker spends its time on drains.
	wakeAt(ctx, now)
	return reconcile.Result{}, nil
}

// decide runs the gates for a node whose toleration has passed. The fleet is
// counted from the cache at the moment of the decision. The caller calls
// release once the repair's start is written (or not started): an
// opted-in control-plane node's decision holds the others' until then.
func (r *Reconciler) decide(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, set *policy.Set, now time.Time) (_ gate.Decision, _ group, release func(), _ error) {
	release = noRelease
	in := gate.Input{Vetoed: st.Vetoed, Veto: st.Veto, MaxUnhealthy: pol.MaxUnhealthy}
	var err error
	if in.Paused, in.PauseReason, err = r.paused(ctx); err != nil {
		return gate.Decision{}, group{}, release, err
	}
	lookup, err := r.machineLookup(ctx)
	if err != nil {
		return gate.Decision{}, group{}, release, err
	}
	g := group{pool: r.pools.Of(node, lookup), zone: node.Labels[pool.ZoneLabel]}
	var cp gate.Decision
	if !in.Vetoed && !in.Paused {
		if cp, release, err = r.controlPlaneGate(ctx, node, pol); err != nil || !cp.Allowed {
			return cp, g, release, err
		}
		in.Pool, in.Zone, err = r.count(ctx, node, g, set, lookup)
		if err != nil {
			release()
			return gate.Decision{}, group{}, noRelease, err
		}
	}
	d := gate.Decide(in)
	if d.Allowed && cp.Message != "" {
		d.Message += "; " + cp.Message
	}
	return d, g, release, nil
}

func noRelease() {}

// halted checks the switches that stop a repair in progress: the node's
// veto and the cluster-wide pause. The pool and zone gates are not
// rechecked: the node is counted as unhealthy anyway, and a half-drained
// node is better finished.
func (r *Reconciler) halted(ctx context.Context, node *corev1.Node, st record.State, now time.Time) (bool, error) {
	in := gate.Input{Vetoed: st.Vetoed, Veto: st.Veto}
	var err error
	if in.Paused, in.PauseReason, err = r.paused(ctx); err != nil {
		return false, err
	}
	d := gate.Decide(in)
	if d.Gate != gate.Veto && d.Gate != gate.Pause {
		r.unblock(node.Name)
		return false, nil
	}
	if d.Gate == gate.Veto {
		r.releaseDrain(node.Name) // a vetoed repair may stay for long: its turn goes on
	}
	d.Message += fmt.Sprintf(" (repair in phase %s halted)", st.Phase)
	r.block(ctx, node, d, group{})
	wakeAt(ctx, now.Add(r.opts.RecheckInterval))
	return true, nil
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
	if r.emit(blockedEvent(node, node.Name, key, d, r.opts.RecheckInterval, &g)) {
		ctrl.LoggerFrom(ctx).Info("repair blocked", "gate", d.Gate, "reason", d.Message)
		r.metrics.Blocked(string(d.Gate))
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
	r.mu.Unlock()
	if d.Gate == gate.Pool && g.pool.HasObject() {
		r.poolEvent(ctx, g, where, d)
	}
}

// unblock forgets that a node was blocked (it passed the gates, recovered,
// or is gone). A pool stays blocked while any of its nodes is; the event on
// the pool object is emitted again for the next blocked episode.
func (r *Reconciler) unblock(node string) {
	r.dedupe.forget(node, history.Blocked)
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
	r.dedupe.forget(poolSubject(b.where))
}

// poolEvent emits NodeRepairBlocked on the pool's object (NodePool,
// MachineDeployment, MachineSet) if it exists, once per blocked episode:
// the object is looked up only for the first.
func (r *Reconciler) poolEvent(ctx context.Context, g group, where string, d gate.Decision) {
	ev := blockedEvent(nil, poolSubject(where), "", d, r.opts.RecheckInterval, &g)
	if !r.due(ev) {
		return
	}
	p := g.pool
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
	ev.regarding = ref
	r.send(ev)
}

// policies compiles the NodeRepairPolicies in the cache, or returns the set
// compiled last while they are unchanged (the gate's tallies are valid for
// one set); with report, problems are reported once per policy generation
// as events on the policy.
func (r *Reconciler) policies(ctx context.Context, report bool) (*policy.Set, error) {
	list := &v1alpha1.NodeRepairPolicyList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil, err
	}
	agents, key := r.agents.current()
	set, problems := r.policySet.compile(list.Items, agents, key)
	if !report {
		return set, nil
	}
	for _, p := range problems {
		for i := range list.Items {
			o := &list.Items[i]
			if o.Name != p.Policy {
				continue
			}
			msg := fmt.Sprint(p.Warnings)
			if p.Err != nil {
				msg = "policy ignored: " + p.Err.Error()
			}
			if r.emit(invalidPolicyEvent(o, msg)) {
				ctrl.LoggerFrom(ctx).Info("NodeRepairPolicy problem", "policy", o.Name, "problem", msg)
			}
		}
	}
	return set, nil
}

// policySet keeps the last compiled policy set with what it was compiled
// from (each policy's UID and resourceVersion, and the state of the agents'
// configuration).
type policySet struct {
	mu       sync.Mutex
	from     []string
	set      *policy.Set
	problems []policy.Problem
}

func (c *policySet) compile(objs []v1alpha1.NodeRepairPolicy, agents policy.AgentQuietPeriods, agentsKey string) (*policy.Set, []policy.Problem) {
	from := make([]string, len(objs), len(objs)+1)
	for i := range objs {
		from[i] = string(objs[i].UID) + "/" + objs[i].ResourceVersion
	}
	slices.Sort(from)
	from = append(from, "agents "+agentsKey)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set != nil && slices.Equal(from, c.from) {
		return c.set, c.problems
	}
	c.set, c.problems = policy.NewSetWith(objs, agents)
	c.from = from
	return c.set, c.problems
}

// paused reads the pause switch.
func (r *Reconciler) paused(ctx context.Context) (bool, string, error) {
	cm := &corev1.ConfigMap{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: r.opts.Namespace, Name: r.opts.PauseConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	reason := cm.Data["reason"]
	if reason == "" {
		reason = fmt.Sprintf("ConfigMap %s/%s exists", cm.Namespace, cm.Name)
	}
	return true, reason, nil
}
