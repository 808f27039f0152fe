package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
	"nodemend.dev/nodemend/pkg/repair/workflow"
)

// Event reasons. Like the annotations, these strings are an interface.
const (
	EventRecovered     = "NodeRecovered"
	EventBlocked       = "NodeRepairBlocked"
	EventWouldStart    = "NodeRepairWouldStart"
	EventStarted       = "NodeRepairStarted"
	EventDrainBlocked  = "NodeDrainBlocked"
	EventDrainForced   = "NodeDrainDeadlineExceeded"
	EventHandedOver    = "NodeRepairHandedOver"
	EventTargetDeleted = "NodeRepairTargetDeleted"
	EventSucceeded     = "NodeRepairSucceeded"
	EventFailed        = "NodeRepairFailed"
	EventInvalidState  = "NodeRepairStateInvalid"
	EventInvalidPolicy = "NodeRepairPolicyInvalid"
)

// keyActionNone dedups the log line of a node whose policy's action is None.
const keyActionNone = "action-none"

// Reconcile moves one node one or more steps along its repair.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// A write based on a cached node that had changed meanwhile (our
		// own previous write, usually): try again once the cache caught
		// up, backing off while it keeps conflicting (conflicts.go).
		delay := r.conflicts.next(req.Name)
		ctrl.LoggerFrom(ctx).V(1).Info("conflict; retrying", "error", err.Error(), "in", delay)
		return reconcile.Result{RequeueAfter: delay}, nil
	}
	r.conflicts.forget(req.Name)
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := ctx.Err(); err != nil {
		return reconcile.Result{}, err // stopping: no new step
	}
	log := ctrl.LoggerFrom(ctx)
	node := &corev1.Node{}
	if err := r.client.Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			r.gone(ctx, req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	st, err := workflow.Read(node)
	if err != nil {
		// Guessing at a half-written state could repair twice or never
		// finish; a human fixes the annotations instead.
		if r.notifyOnce(node.Name, EventInvalidState, err.Error()) {
			log.Error(err, "repair state on the node is invalid; leaving the node alone")
			r.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventInvalidState, "Inspect", "%s; nodemend leaves this node alone until the nodemend.dev/ annotations are fixed", err)
		}
		return reconcile.Result{}, nil
	}
	set, err := r.policies(ctx, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.opts.Clock.Now()
	pol := set.For(node.Labels)
	if st.InRepair() {
		r.track(node, st)
	}
	if node.DeletionTimestamp != nil {
		// Someone (usually the backend) is removing the node: wait for it.
		return reconcile.Result{}, nil
	}
	switch st.Phase {
	case workflow.PhaseNone:
		asmt := unhealthy.Assess(node.Status.Conditions, pol.Rules, st.Since, now)
		return r.tolerate(ctx, node, st, pol, set, asmt, now)
	case workflow.PhaseDraining:
		return r.drain(ctx, node, st, pol, now)
	default:
		return r.terminate(ctx, node, st, now)
	}
}

// tolerate handles a node not under repair: record or clear its unhealthy
// period, wait for the toleration, pass the gates, start the repair.
func (r *Reconciler) tolerate(ctx context.Context, node *corev1.Node, st workflow.State, pol policy.Policy, set *policy.Set, asmt unhealthy.Assessment, now time.Time) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if !asmt.Unhealthy() {
		r.forget(node.Name)
		if len(st.Since) > 0 && !r.opts.DryRun {
			if err := r.patch(ctx, node, workflow.WithSince(node, nil), false); err != nil {
				return reconcile.Result{}, err
			}
			log.Info("node recovered before its toleration passed", "unhealthySince", st.Since.String())
			r.recorder.Eventf(node, nil, corev1.EventTypeNormal, EventRecovered, "Tolerate", "conditions healthy again before the toleration passed; repair clock reset")
		}
		return reconcile.Result{}, nil
	}
	if !r.opts.DryRun && !asmt.Since.Equal(st.Since) {
		updated := workflow.WithSince(node, asmt.Since)
		if err := r.patch(ctx, node, updated, false); err != nil {
			return reconcile.Result{}, err
		}
		node = updated
		log.Info("node unhealthy", "unhealthySince", asmt.Since.String(), "policy", pol.Name, "expires", asmt.NextExpiry().UTC().Format(time.RFC3339))
		if err := r.after(ctx, node.Name, StepUnhealthyRecorded); err != nil {
			return reconcile.Result{}, err
		}
	}
	if pol.Action == v1alpha1.ActionNone {
		r.cancelWake(node.Name)
		if r.notifyOnce(node.Name, keyActionNone, pol.Name) {
			log.Info("node unhealthy; its policy's action is None, so it is only counted", "policy", pol.Name)
		}
		return reconcile.Result{}, nil
	}
	trigger, expired := asmt.Expired(now)
	if !expired {
		r.wakeAt(node.Name, asmt.NextExpiry())
		return reconcile.Result{}, nil
	}
	d, grp, err := r.decide(ctx, node, st, pol, set, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !d.Allowed {
		r.block(ctx, node, d, grp)
		r.wakeAt(node.Name, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	r.unblock(node.Name)
	what := fmt.Sprintf("%s since %s (toleration %s, policy %s)", workflow.Reason(trigger.Condition),
		trigger.Since.UTC().Format(time.RFC3339), trigger.Rule.Toleration, pol.Name)
	if r.opts.DryRun {
		if r.notifyOnce(node.Name, EventWouldStart, trigger.Since.String()) {
			log.Info("dry run: would start repair", "trigger", workflow.Reason(trigger.Condition), "policy", pol.Name, "gate", d.Message)
			r.recorder.Eventf(node, nil, corev1.EventTypeNormal, EventWouldStart, "DryRun", "dry run: would taint, drain and replace this node: %s; %s", what, d.Message)
		}
		r.wakeAt(node.Name, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	started := workflow.Started(node, asmt.Since, trigger.Condition, pol.Name, now)
	if err := r.patch(ctx, node, started, true); err != nil {
		return reconcile.Result{}, err
	}
	r.metrics.Started(string(trigger.Rule.Type), trigger.Condition.Reason, now.Sub(trigger.Since))
	log.Info("repair started", "trigger", workflow.Reason(trigger.Condition), "policy", pol.Name, "gate", d.Message)
	r.recorder.Eventf(started, nil, corev1.EventTypeNormal, EventStarted, "Taint", "%s: tainted %s:NoSchedule; drain %s, deadline %s; %s",
		what, workflow.TaintKey, pol.Drain.Mode, pol.Drain.Deadline, d.Message)
	if err := r.after(ctx, node.Name, StepTainted); err != nil {
		return reconcile.Result{}, err
	}
	st, err = workflow.Read(started)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.track(started, st)
	return r.drain(ctx, started, st, pol, now)
}

// drain runs one drain pass and, when the node is empty, hands it over.
func (r *Reconciler) drain(ctx context.Context, node *corev1.Node, st workflow.State, pol policy.Policy, now time.Time) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if halted, err := r.halted(ctx, node, st, now); halted || err != nil {
		return reconcile.Result{}, err
	}
	if !st.Tainted {
		// Someone removed the taint mid-repair; without it the pods
		// drained would be scheduled right back. (To stop a repair, set
		// the veto annotation instead.)
		updated := node.DeepCopy()
		workflow.EnsureTaint(updated, st.Condition)
		if err := r.patch(ctx, node, updated, true); err != nil {
			return reconcile.Result{}, err
		}
		node = updated
	}
	deadline := st.Started.Add(pol.Drain.Deadline)
	pastDeadline := !now.Before(deadline)
	res, err := r.drainer.Pass(ctx, node.Name, pol.Drain.Mode, pastDeadline, kubeletReady(node))
	if res.Evicted+res.Deleted > 0 {
		log.Info("drain pass", "evicted", res.Evicted, "deleted", res.Deleted, "blocked", res.Blocked, "terminating", res.Terminating)
		if res.Deleted > 0 && pol.Drain.Mode == v1alpha1.DrainEvict && r.notifyOnce(node.Name, EventDrainForced, "") {
			r.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventDrainForced, "Drain",
				"drain deadline %s passed: deleted %d remaining pods without honouring PodDisruptionBudgets", pol.Drain.Deadline, res.Deleted)
		}
		if err := r.after(ctx, node.Name, StepEvicted); err != nil {
			return reconcile.Result{}, err
		}
	}
	if res.Blocked > 0 && r.notifyOnce(node.Name, EventDrainBlocked, "") {
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventDrainBlocked, "Drain",
			"%d evictions refused by PodDisruptionBudgets (%s); retrying until the deadline %s", res.Blocked, res.Message, deadline.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if !res.Done {
		next := now.Add(r.opts.DrainPollInterval)
		if !pastDeadline && deadline.Before(next) {
			next = deadline
		}
		r.wakeAt(node.Name, next)
		return reconcile.Result{}, nil
	}

	name := backend.Choose(node, r.opts.Backend)
	target, err := r.backends[name].Resolve(ctx, node)
	if err != nil {
		if !errors.Is(err, backend.ErrNoTarget) {
			return reconcile.Result{}, err
		}
		r.fail(ctx, node, st, now, fmt.Sprintf("cannot hand the node to the %s backend: %v", name, err))
		r.wakeAt(node.Name, now.Add(r.opts.RecheckInterval))
		return reconcile.Result{}, nil
	}
	updated := workflow.HandedOver(node, target, now)
	if err := r.patch(ctx, node, updated, true); err != nil {
		return reconcile.Result{}, err
	}
	r.metrics.Drained(now.Sub(st.Started))
	if target.Kind != "Node" {
		log = log.WithValues(target.Kind, klog.KRef(target.Namespace, target.Name))
	}
	log.Info("drained; handing the node to its backend", "backend", name, "target", target.String())
	r.recorder.Eventf(updated, nil, corev1.EventTypeNormal, EventHandedOver, "Drain", "drained in %s; handing the node to the %s backend: deleting %s",
		now.Sub(st.Started).Round(time.Second), name, target)
	if err := r.after(ctx, node.Name, StepHandedOver); err != nil {
		return reconcile.Result{}, err
	}
	st, err = workflow.Read(updated)
	if err != nil {
		return reconcile.Result{}, err
	}
	return r.terminate(ctx, updated, st, now)
}

// terminate deletes the backend's target (once) and waits for the node to
// go; a node that outlives the termination timeout is reported failed.
func (r *Reconciler) terminate(ctx context.Context, node *corev1.Node, st workflow.State, now time.Time) (reconcile.Result, error) {
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
	out, err := backend.DeleteOnce(ctx, r.apiReader, r.client, t)
	if err != nil {
		return reconcile.Result{}, err
	}
	if out == backend.Deleted {
		log.Info("deleted the node's backend object; waiting for the node to go", "backend", t.Backend)
		r.recorder.Eventf(node, nil, corev1.EventTypeNormal, EventTargetDeleted, "Delete", "deleted %s; the repair is done when the node object is gone", t)
		if err := r.after(ctx, node.Name, StepTargetDeleted); err != nil {
			return reconcile.Result{}, err
		}
	}
	failAt := st.Drained.Add(r.opts.TerminationTimeout)
	if now.Before(failAt) {
		r.wakeAt(node.Name, failAt)
		return reconcile.Result{}, nil
	}
	r.fail(ctx, node, st, now, fmt.Sprintf("the node still exists %s after %s was deleted; check the %s engine", now.Sub(st.Drained).Round(time.Second), t, t.Backend))
	return reconcile.Result{}, nil
}

// halted checks the switches that stop a repair in progress: the node's
// veto and the cluster-wide pause. The pool and zone gates are not
// rechecked: the node is counted as unhealthy anyway, and a half-drained
// node is better finished.
func (r *Reconciler) halted(ctx context.Context, node *corev1.Node, st workflow.State, now time.Time) (bool, error) {
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
	d.Message += fmt.Sprintf(" (repair in phase %s halted)", st.Phase)
	r.block(ctx, node, d, group{})
	r.wakeAt(node.Name, now.Add(r.opts.RecheckInterval))
	return true, nil
}

// fail reports a repair failure once (recorded on the node).
func (r *Reconciler) fail(ctx context.Context, node *corev1.Node, st workflow.State, now time.Time, msg string) {
	log := ctrl.LoggerFrom(ctx)
	if !st.Failed.IsZero() {
		return
	}
	// Optimistic lock: a reconcile that read the node before another one
	// recorded the failure must not report it a second time.
	if err := r.patch(ctx, node, workflow.MarkedFailed(node, now), true); err != nil {
		if !apierrors.IsConflict(err) {
			log.Error(err, "recording repair failure")
		}
		return
	}
	r.metrics.Failed(string(st.Condition), workflow.ConditionReason(st.Reason))
	log.Error(errors.New(msg), "repair failed")
	r.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventFailed, "Repair", "%s", msg)
}

// gone completes a repair whose node has disappeared.
func (r *Reconciler) gone(ctx context.Context, name string) {
	r.cancelWake(name)
	r.unblock(name)
	r.mu.Lock()
	inf, ok := r.inflight[name]
	delete(r.inflight, name)
	delete(r.notified, name)
	r.mu.Unlock()
	if !ok {
		return
	}
	took := r.opts.Clock.Since(inf.since)
	r.metrics.Succeeded(inf.condition, inf.reason, took)
	ctrl.LoggerFrom(ctx).Info("repair succeeded: node gone", "sinceUnhealthy", took.Round(time.Second).String())
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: inf.uid}
	r.recorder.Eventf(ref, nil, corev1.EventTypeNormal, EventSucceeded, "Repair", "node gone %s after it became unhealthy (%s)", took.Round(time.Second), inf.condition)
}

func (r *Reconciler) track(node *corev1.Node, st workflow.State) {
	since := st.Since.Earliest()
	if since.IsZero() {
		since = st.Started
	}
	r.mu.Lock()
	r.inflight[node.Name] = inflight{uid: node.UID, condition: string(st.Condition), reason: workflow.ConditionReason(st.Reason), since: since}
	r.mu.Unlock()
}

// forget drops what is remembered about a node that is healthy again.
func (r *Reconciler) forget(name string) {
	r.cancelWake(name)
	r.unblock(name)
	r.mu.Lock()
	delete(r.notified, name)
	r.mu.Unlock()
}

// after runs the test hook.
func (r *Reconciler) after(ctx context.Context, node string, s Step) error {
	if r.opts.AfterStep == nil {
		return nil
	}
	return r.opts.AfterStep(ctx, node, s)
}

// patch writes the difference between old and updated as a JSON merge
// patch; updated receives the result. With lock, the patch carries old's
// resourceVersion, so that a write based on a stale cache (or a second
// leader) fails instead of overwriting: taints are a list that a merge patch
// replaces whole.
func (r *Reconciler) patch(ctx context.Context, old, updated *corev1.Node, lock bool) error {
	// A replica that lost leadership or is shutting down must not act: its
	// context ends first. (The HTTP/2 transport would still send a request
	// whose context has ended, so it is checked here.)
	if err := ctx.Err(); err != nil {
		return err
	}
	var p client.Patch
	if lock {
		p = client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})
	} else {
		p = client.MergeFrom(old)
	}
	return r.client.Patch(ctx, updated, p)
}

// policies compiles the NodeRepairPolicies in the cache; with report,
// problems are reported once per policy generation as events on the policy.
func (r *Reconciler) policies(ctx context.Context, report bool) (*policy.Set, error) {
	list := &v1alpha1.NodeRepairPolicyList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil, err
	}
	set, problems := policy.NewSet(list.Items)
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
			if r.notifyOnce("policy/"+o.Name, EventInvalidPolicy, fmt.Sprintf("%d/%s", o.Generation, msg)) {
				ctrl.LoggerFrom(ctx).Info("NodeRepairPolicy problem", "policy", o.Name, "problem", msg)
				r.recorder.Eventf(o, nil, corev1.EventTypeWarning, EventInvalidPolicy, "Validate", "%s", msg)
			}
		}
	}
	return set, nil
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

// notifyOnce reports whether (reason, key) is new for subject, and remembers
// it: events are emitted once per state, not on every re-check.
func (r *Reconciler) notifyOnce(subject, reason, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.notified[subject]
	if m == nil {
		m = map[string]string{}
		r.notified[subject] = m
	}
	if old, ok := m[reason]; ok && old == key {
		return false
	}
	m[reason] = key
	return true
}

func (r *Reconciler) clearNotified(subject, reason string) {
	r.mu.Lock()
	delete(r.notified[subject], reason)
	r.mu.Unlock()
}

func kubeletReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
