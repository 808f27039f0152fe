package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/nodepatch"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// Reconcile moves one node one or more steps along its repair.
//
// A write that conflicted (it was based on a cached node that had changed
// meanwhile: our own previous write, usually) or that admission refused
// (the evidence a step requires was not there when the request arrived,
// docs/security.md) is returned as the error: controller-runtime retries
// the node through the controller's rate limiter, RetryInitial doubling to
// RetryMax per node and starting over after a reconcile that succeeds, so
// a node that keeps conflicting is retried ever more slowly, never in a
// hot loop; the retry reads the node and decides again.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, next := withWakeup(ctx)
	res, err := r.reconcile(ctx, req)
	if err != nil {
		return res, err
	}
	return r.result(req.Name, next), nil
}

// reconcile reads the node and its recorded repair state and hands it to
// the step of its phase: tolerate (decide.go) while no repair runs, drain
// or terminate (steps.go) while one does.
func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := ctx.Err(); err != nil {
		return reconcile.Result{}, err // stopping: no new step
	}
	r.sendHeld(req.Name) // the previous decision's event, before this step's own
	log := ctrl.LoggerFrom(ctx)
	node := &corev1.Node{}
	if err := r.client.Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			r.gone(ctx, req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	st, err := record.Read(node)
	if err != nil {
		// Guessing at a half-written state could repair twice or never
		// finish; a human fixes the annotations instead.
		if r.emit(invalidStateEvent(node, err)) {
			log.Error(err, "repair state on the node is invalid; leaving the node alone")
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
	if st.Legacy && !r.opts.DryRun {
		// A node as the previous release left it: the record it was read
		// into is written, and the old annotations removed, in one
		// guarded write before the repair goes on.
		if node, err = r.write(ctx, node, st.Record, st.Record, true); err != nil {
			return reconcile.Result{}, err
		}
		st.Legacy = false
		log.Info("converted the previous release's repair annotations to the repair record", "phase", st.Phase)
	}
	switch st.Phase {
	case record.PhaseNone:
		asmt := unhealthy.Assess(node.Status.Conditions, pol.Rules, st.Since, now)
		if !asmt.Unhealthy() && len(st.Since) == 0 && !st.RepairRequested {
			// Healthy: a cloud's scheduled event may drain it
			// (scheduled.go).
			if res, handled, err := r.scheduledEvent(ctx, node, st, pol, set, now); handled || err != nil {
				return res, err
			}
		}
		return r.tolerate(ctx, node, st, pol, set, asmt, now)
	case record.PhaseDraining:
		return r.drain(ctx, node, st, pol, now)
	case record.PhaseRemediating:
		if st.Rung.Order == "" {
			// The next attempt was decided, not yet carried out.
			return r.carryOut(ctx, node, st, pol, *st.Rung, now)
		}
		return r.remediate(ctx, node, st, pol, now)
	case record.PhaseQuarantined:
		return r.quarantined(ctx, node, st, pol, now)
	default:
		return r.terminate(ctx, node, st, now, false)
	}
}

// track remembers a repair in progress, so that the node's disappearance
// is reported as its success.
func (r *Reconciler) track(node *corev1.Node, st record.State) {
	since := st.Since.Earliest()
	if since.IsZero() {
		since = st.Started.Time
	}
	r.mu.Lock()
	prev := r.inflight[node.Name]
	r.inflight[node.Name] = inflight{uid: node.UID, trigger: repairTrigger(st), since: since,
		deletedSelf: prev.deletedSelf && prev.uid == node.UID}
	r.mu.Unlock()
}

// markDeletedSelf records that this process deleted node's own object.
func (r *Reconciler) markDeletedSelf(node *corev1.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if inf, ok := r.inflight[node.Name]; ok && inf.uid == node.UID {
		inf.deletedSelf = true
		r.inflight[node.Name] = inf
	}
}

// deletedSelf reports whether this process deleted node's own object.
func (r *Reconciler) deletedSelf(node *corev1.Node) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	inf, ok := r.inflight[node.Name]
	return ok && inf.uid == node.UID && inf.deletedSelf
}

// forget drops what is remembered about a node that is healthy again.
func (r *Reconciler) forget(ctx context.Context, name string) {
	noWake(ctx)
	r.unblock(name)
	r.dedupe.forget(name)
	r.leaveBacklog(name)
}

// leaveBacklog takes a node that is not (or no longer) due out of the
// breaker's backlogs, and out of the drain queue it may have joined while
// its turn came (gate.Breaker.Admit's acquire). A healthy node is
// reconciled at every status change: only one that waited wakes anyone.
func (r *Reconciler) leaveBacklog(name string) {
	waited := r.breaker.Forget(name)
	if r.drains.Has(name) {
		r.releaseDrain(name)
	} else if waited {
		r.wakeHeads(nil)
	}
}

// write puts next, the record that follows prev, on node (with the taint
// and cordon that go with it: record.Apply) in one patch, and returns the
// node as written.
func (r *Reconciler) write(ctx context.Context, node *corev1.Node, prev, next record.Record, lock bool) (*corev1.Node, error) {
	updated := record.Apply(node, prev, next)
	if err := r.patch(ctx, node, updated, lock); err != nil {
		return nil, err
	}
	return updated, nil
}

// repairTrigger is the trigger of st's repair (empty for a record without one).
func repairTrigger(st record.State) v1alpha1.RepairTrigger {
	if st.Trigger == nil {
		return v1alpha1.RepairTrigger{}
	}
	return *st.Trigger
}

// patch writes the difference between old and updated (nodePatch);
// updated receives the result. With lock, the patch carries old's
// resourceVersion, so that a write based on a stale cache (or a second
// leader) fails instead of overwriting: taints are a list that either kind
// of patch replaces whole.
func (r *Reconciler) patch(ctx context.Context, old, updated *corev1.Node, lock bool) error {
	// A replica that lost leadership or is shutting down must not act: its
	// context ends first. (The HTTP/2 transport would still send a request
	// whose context has ended, so it is checked here.)
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := nodePatch(old, updated, lock)
	if err != nil {
		return err
	}
	return r.client.Patch(ctx, updated, p)
}

// nodePatch is the patch of a repair's write: built from the fields the
// repair writes (pkg/repair/nodepatch, a seventh of the CPU of diffing two
// whole nodes) and sent as a strategic merge patch, which the API server
// applies to the node without encoding it to JSON and back (the merge
// patch costs it more: docs/performance.md); the whole-node diff, as a
// JSON merge patch, when a write changes anything else.
func nodePatch(old, updated *corev1.Node, lock bool) (client.Patch, error) {
	data, ok, err := nodepatch.Merge(old, updated, lock)
	if err != nil {
		return nil, err
	}
	if ok {
		return client.RawPatch(types.StrategicMergePatchType, data), nil
	}
	if lock {
		return client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}), nil
	}
	return client.MergeFrom(old), nil
}

func kubeletReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
