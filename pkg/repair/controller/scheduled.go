package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/fleetcount"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/scheduled"
)

// This file drains a healthy node ahead of an event its cloud scheduled
// for it, where its policy says so (spec.scheduledEvents.action: Drain;
// docs/repair.md, Scheduled events): on the evidence of the node's own
// agent (pkg/repair/scheduled), through the repair's gates, cordon and
// evictions only — never the repair taint, a rung, or a deletion — and
// the cordon lifted once the agent no longer reports the event. A node
// that becomes unhealthy meanwhile is repaired as any other; its record
// stays until it is healthy and the event is gone.

// scheduledSubject is the dedupe subject of a node's scheduled drain
// events, apart from its repair's.
func scheduledSubject(node string) string { return "scheduled/" + node }

// agentEventNode maps one of the agents' Events to the node it is about,
// for the reasons of a scheduled event only.
func agentEventNode(_ context.Context, o client.Object) []reconcile.Request {
	e, ok := o.(*corev1.Event)
	if !ok || !scheduled.IsReason(e.Reason) || e.InvolvedObject.Kind != "Node" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: e.InvolvedObject.Name}}}
}

// scheduledEvent handles a node not under repair and healthy under its
// policy: it starts, continues or ends a drain ahead of a scheduled event.
// handled is false when there is none to start and none recorded: the
// caller goes on as for any healthy node.
func (r *Reconciler) scheduledEvent(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, set *policy.Set, now time.Time) (_ reconcile.Result, handled bool, _ error) {
	log := ctrl.LoggerFrom(ctx)
	rec, err := scheduled.Read(node)
	if err != nil {
		// Unreadable: it is ended below, without lifting a cordon it may
		// not have set.
		log.Error(err, "scheduled drain record invalid; removing it")
	}
	recorded := scheduled.Draining(node)
	var rep scheduled.Report
	active := false
	if pol.DrainOnScheduledEvent {
		if rep, active, err = r.scheduledEvidence(ctx, node.Name, now); err != nil {
			return reconcile.Result{}, true, err
		}
	}
	switch {
	case !active && !recorded:
		r.dedupe.forget(scheduledSubject(node.Name))
		return reconcile.Result{}, false, nil
	case !active:
		if r.opts.DryRun {
			return reconcile.Result{}, true, nil
		}
		why := "the node's agent no longer reports a scheduled event"
		if !pol.DrainOnScheduledEvent {
			why = "its policy " + pol.Name + " no longer drains on scheduled events"
		}
		ended := scheduled.End(node, rec)
		if err := r.patch(ctx, node, ended, true); err != nil {
			return reconcile.Result{}, true, err
		}
		r.releaseDrain(node.Name)
		r.dedupe.forget(scheduledSubject(node.Name))
		uncordoned := rec != nil && rec.Cordoned
		log.Info("scheduled event over; drain ended", "uncordoned", uncordoned, "why", why)
		r.emit(scheduledEndedEvent(ended, why, uncordoned))
		return reconcile.Result{}, true, nil
	}
	if !recorded {
		return r.startScheduledDrain(ctx, node, st, pol, set, rep, now)
	}
	// Draining: evictions only (honouring PodDisruptionBudgets, never a
	// deletion), until the node is empty; then the event's end is awaited.
	if !r.drainTurn(ctx, node.Name, pol, now) {
		return reconcile.Result{}, true, nil
	}
	res, err := r.drainer.Pass(ctx, node.Name, v1alpha1.DrainEvict, false, kubeletReady(node))
	if res.Evicted > 0 {
		log.Info("scheduled drain pass", "evicted", res.Evicted, "blocked", res.Blocked, "terminating", res.Terminating)
	}
	if res.Blocked > 0 {
		r.emit(event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.DrainBlocked, action: "ScheduledDrain",
			note:   fmt.Sprintf("%d pods not evicted ahead of the scheduled event: %s; retrying", res.Blocked, res.Message),
			record: history.Record{}, once: &onceKey{scheduledSubject(node.Name), res.Message}})
	}
	if err != nil {
		return reconcile.Result{}, true, err
	}
	next := rep.Expires()
	if !res.Done {
		wakeAt(ctx, minTime(next, now.Add(r.opts.DrainPollInterval)))
		return reconcile.Result{}, true, nil
	}
	r.releaseDrain(node.Name)
	wakeAt(ctx, next)
	return reconcile.Result{}, true, nil
}

// startScheduledDrain passes the gates and cordons the node, recording the
// drain in the same write.
func (r *Reconciler) startScheduledDrain(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, set *policy.Set, rep scheduled.Report, now time.Time) (reconcile.Result, bool, error) {
	log := ctrl.LoggerFrom(ctx)
	d, release, err := r.scheduledGate(ctx, node, st, pol, set)
	defer release()
	if err != nil {
		return reconcile.Result{}, true, err
	}
	if !d.Allowed {
		if r.emit(event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.Blocked, action: "ScheduledDrain",
			note:   fmt.Sprintf("not drained ahead of the cloud's scheduled event (%s): %s; re-checking every %s", rep.Reason, d.Message, r.opts.RecheckInterval),
			record: history.Record{Gate: string(d.Gate)}, once: &onceKey{scheduledSubject(node.Name), d.Message}}) {
			log.Info("scheduled drain blocked", "gate", d.Gate, "reason", d.Message)
		}
		wakeAt(ctx, minTime(rep.Expires(), now.Add(r.opts.RecheckInterval)))
		return reconcile.Result{}, true, nil
	}
	if r.opts.DryRun {
		return reconcile.Result{}, true, nil
	}
	started := scheduled.Start(node, rep.Reason, now)
	if err := r.patch(ctx, node, started, true); err != nil {
		return reconcile.Result{}, true, err
	}
	log.Info("cordoned ahead of a scheduled event; draining", "reason", rep.Reason, "event", rep.Message, "gate", d.Message)
	r.emit(event{regarding: started, eventType: corev1.EventTypeNormal, reason: history.ScheduledDrain, action: "ScheduledDrain",
		note: fmt.Sprintf("cordoned and draining ahead of the cloud's scheduled event, as policy %s says (scheduledEvents.action Drain; %s): %s: %s",
			pol.Name, d.Message, rep.Reason, rep.Message),
		record: history.Record{}, once: &onceKey{scheduledSubject(node.Name), rep.Reason}})
	wakeAt(ctx, now)
	return reconcile.Result{}, true, nil
}

// scheduledGate runs a repair's gates for a drain ahead of a scheduled
// event: the veto, the pause, the control-plane gate, and the pool and
// zone counts with the node counted as the disruption it is about to be.
func (r *Reconciler) scheduledGate(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, set *policy.Set) (gate.Decision, func(), error) {
	release := noRelease
	in := gate.Input{Vetoed: st.Vetoed, Veto: st.Veto, MaxUnhealthy: pol.MaxUnhealthy}
	var err error
	if in.Paused, in.PauseReason, err = r.paused(ctx); err != nil {
		return gate.Decision{}, release, err
	}
	if in.Vetoed || in.Paused {
		return gate.Decide(in), release, nil
	}
	lookup, err := r.machineLookup(ctx)
	if err != nil {
		return gate.Decision{}, release, err
	}
	g := group{pool: r.pools.Of(node, lookup), zone: node.Labels[pool.ZoneLabel]}
	cp, release, err := r.controlPlaneGate(ctx, node, pol)
	if err != nil || !cp.Allowed {
		return cp, release, err
	}
	if in.Pool, in.Zone, err = r.count(ctx, node, g, set, lookup); err != nil {
		release()
		return gate.Decision{}, noRelease, err
	}
	if !fleetcount.Unhealthy(node, set) {
		// The counts are of nodes unhealthy or out of service; this one
		// is about to be.
		in.Pool.Unhealthy++
		if in.Zone != nil {
			in.Zone.Unhealthy++
		}
	}
	return gate.Decide(in), release, nil
}

// scheduledEvidence is the newest report of a scheduled event by the
// node's agent that is not over (pkg/repair/scheduled), from the cache
// of the agents' Warnings.
func (r *Reconciler) scheduledEvidence(ctx context.Context, node string, now time.Time) (scheduled.Report, bool, error) {
	evs := &corev1.EventList{}
	if err := r.client.List(ctx, evs, client.InNamespace(metav1.NamespaceDefault), client.MatchingFields{agentEventNodeIndex: node}); err != nil {
		return scheduled.Report{}, false, err
	}
	rep, ok := scheduled.Evidence(node, evs.Items, now)
	return rep, ok, nil
}

// agentEventNodeIndex indexes the cached Events by the node they are about.
const agentEventNodeIndex = "involvedObject.node"

func agentEventIndex(o client.Object) []string {
	if e, ok := o.(*corev1.Event); ok && e.InvolvedObject.Kind == "Node" {
		return []string{e.InvolvedObject.Name}
	}
	return nil
}

func scheduledEndedEvent(node *corev1.Node, why string, uncordoned bool) event {
	note := "drain ahead of a scheduled event ended: " + why
	if uncordoned {
		note += "; cordon lifted"
	} else {
		note += "; the node was cordoned before, and stays so"
	}
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.ScheduledDrainEnded, action: "ScheduledDrain", note: note, record: history.Record{}}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
