package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// This file runs a repair that has started: drain passes until the node is
// empty or its deadline passed, the hand-over to the node's backend, the
// deletion of the backend's target, and the end of the repair (the node is
// gone, or it outlived the termination timeout). Each step is recorded on
// the node before the next, so that any leader resumes it.

// drain runs one drain pass and, when the node is empty, hands it over.
func (r *Reconciler) drain(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, now time.Time) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if halted, err := r.halted(ctx, node, st, now); halted || err != nil {
		return reconcile.Result{}, err
	}
	if !st.Tainted {
		// Someone removed the taint mid-repair; without it the pods
		// drained would be scheduled right back. (To stop a repair, set
		// the veto annotation instead.)
		var err error
		if node, err = r.write(ctx, node, st.Record, st.Record, true); err != nil {
			return reconcile.Result{}, err
		}
		st.Tainted = true
	}
	if !r.drainTurn(ctx, node.Name, pol, now) {
		return reconcile.Result{}, nil
	}
	deadline := st.Started.Add(pol.Drain.Deadline)
	pastDeadline := !now.Before(deadline)
	res, err := r.drainer.Pass(ctx, node.Name, pol.Drain.Mode, pastDeadline, kubeletReady(node))
	if res.Evicted+res.Deleted > 0 {
		log.Info("drain pass", "evicted", res.Evicted, "deleted", res.Deleted, "blocked", res.Blocked, "terminating", res.Terminating)
		if res.Deleted > 0 && pol.Drain.Mode == v1alpha1.DrainEvict {
			r.emit(drainForcedEvent(node, pol, res))
		}
	}
	if res.Blocked > 0 {
		r.emit(drainBlockedEvent(node, pol, res, deadline))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if !res.Done {
		next := now.Add(r.opts.DrainPollInterval)
		if !pastDeadline && deadline.Before(next) {
			next = deadline
		}
		wakeAt(ctx, next)
		return reconcile.Result{}, nil
	}

	return r.drained(ctx, node, st, pol, now)
}

// handOver gives a drained node to its backend (the Replace rung).
func (r *Reconciler) handOver(ctx context.Context, node *corev1.Node, st record.State, now time.Time) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	be := r.backends.Choose(node, r.opts.Backend)
	name := be.Name()
	target, err := be.Resolve(ctx, node)
	if err != nil {
		if !errors.Is(err, backend.ErrNoTarget) {
			return reconcile.Result{}, err
		}
		r.fail(ctx, node, st, now, fmt.Sprintf("cannot hand the node to the %s backend: %v", name, err))
		wakeAt(ctx, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	next := record.HandOver(st.Record, target, now)
	updated, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.Record = next
	r.releaseDrain(node.Name)
	r.metrics.Drained(now.Sub(st.Started.Time))
	if target.Kind != "Node" {
		log = log.WithValues(target.Kind, klog.KRef(target.Namespace, target.Name))
	}
	log.Info("drained; handing the node to its backend", "backend", name, "target", target.String())
	r.emit(handedOverEvent(updated, name, target, now.Sub(st.Started.Time)))
	return r.terminate(ctx, updated, st, now, true)
}

// terminate deletes the backend's target (once) and waits for the node to
// go; a node that outlives the termination timeout is reported failed.
// fresh: node is the API server's answer to this reconcile's own patch, so
// a target that is the node itself needs no read before its deletion.
func (r *Reconciler) terminate(ctx context.Context, node *corev1.Node, st record.State, now time.Time, fresh bool) (reconcile.Result, error) {
	t := *st.Target
	log := ctrl.LoggerFrom(ctx)
	if t.Kind != "Node" {
		log = log.WithValues(t.Kind, klog.KRef(t.Namespace, t.Name))
	}
	if halted, err := r.halted(ctx, node, st, now); halted || err != nil {
		return reconcile.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return reconcile.Result{}, err
	}
	var out backend.Outcome
	var err error
	self := t.Kind == "Node" && t.APIVersion == "v1" && t.Name == node.Name
	switch {
	case self && fresh:
		out, err = backend.DeleteSeen(ctx, r.client, t, node)
	case self && r.deletedSelf(node):
		// Deleted by this process; the cached node is one whose deletion
		// the informer has not delivered yet (a reconcile queued by the
		// hand-over's own write, usually): wait for it.
		out = backend.AlreadyDeleting
	default:
		out, err = backend.DeleteOnce(ctx, r.apiReader, r.client, t)
	}
	if apierrors.IsForbidden(err) {
		// Admission deletes nothing without evidence: the node's status
		// showing the fault (docs/security.md). A node that recovered
		// since its drain began is left, drained and tainted, for a
		// person to release or veto; the deletion is tried again at
		// each recheck, not in a loop.
		r.fail(ctx, node, st, now, fmt.Sprintf("the API server refused to delete %s (%v); the node's status may no longer show its fault", t, err))
		wakeAt(ctx, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if out == backend.Deleted && self {
		r.markDeletedSelf(node)
	}
	if out == backend.Deleted {
		log.Info("deleted the node's backend object; waiting for the node to go", "backend", t.Backend)
		r.emit(targetDeletedEvent(node, t))
	}
	failAt := st.Drained.Add(r.opts.TerminationTimeout)
	if now.Before(failAt) {
		wakeAt(ctx, failAt)
		return reconcile.Result{}, nil
	}
	r.fail(ctx, node, st, now, fmt.Sprintf("the node still exists %s after %s was deleted; check the %s engine", now.Sub(st.Drained.Time).Round(time.Second), t, t.Backend))
	return reconcile.Result{}, nil
}

// fail reports a repair failure once (recorded on the node).
func (r *Reconciler) fail(ctx context.Context, node *corev1.Node, st record.State, now time.Time, msg string) {
	log := ctrl.LoggerFrom(ctx)
	if !st.Failed.IsZero() {
		return
	}
	// Optimistic lock: a reconcile that read the node before another one
	// recorded the failure must not report it a second time.
	if _, err := r.write(ctx, node, st.Record, record.Fail(st.Record, now), true); err != nil {
		if !apierrors.IsConflict(err) {
			log.Error(err, "recording repair failure")
		}
		return
	}
	r.releaseDrain(node.Name)
	c := repairTrigger(st)
	r.metrics.Failed(string(c.Type), c.Reason)
	log.Error(errors.New(msg), "repair failed")
	r.emit(failedEvent(node, st, msg))
}

// gone completes a repair whose node has disappeared.
func (r *Reconciler) gone(ctx context.Context, name string) {
	r.unblock(name)
	r.breaker.Forget(name)
	r.releaseDrain(name)
	r.mu.Lock()
	inf, ok := r.inflight[name]
	delete(r.inflight, name)
	r.mu.Unlock()
	r.dedupe.forget(name)
	if !ok {
		return
	}
	took := r.opts.Clock.Since(inf.since)
	r.metrics.Succeeded(string(inf.trigger.Type), inf.trigger.Reason, took)
	ctrl.LoggerFrom(ctx).Info("repair succeeded: node gone", "sinceUnhealthy", took.Round(time.Second).String())
	r.emit(succeededEvent(name, inf, took))
}

// drainTurn reports whether the node may drain now (pkg/repair/slots); a
// node that must wait is woken when its turn comes. The wait is logged
// once per repair, not reported as an event: a storm would write one per
// waiting node.
func (r *Reconciler) drainTurn(ctx context.Context, node string, pol policy.Policy, now time.Time) bool {
	ok, woken := r.drains.Acquire(node, pol.Name, pol.Drain.MaxConcurrent)
	for _, n := range woken {
		r.enqueue(n)
	}
	if !ok && r.dedupe.first(node, keyDrainWait, pol.Name) {
		ctrl.LoggerFrom(ctx).Info("tainted; waiting for a drain turn", "draining", r.drains.Draining(), "waiting", r.drains.Waiting(),
			"maxConcurrentDrains", r.opts.MaxConcurrentDrains, "policy", pol.Name, "policyMaxConcurrent", pol.Drain.MaxConcurrent)
	}
	return ok
}

// releaseDrain ends node's drain turn (or its wait for one) and wakes the
// nodes whose turn it is now.
func (r *Reconciler) releaseDrain(node string) {
	for _, n := range r.drains.Release(node) {
		r.enqueue(n)
	}
	// A freed slot is the next waiting repair's, wherever it waits.
	r.wakeHeads(nil)
}
