package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
	"nodemend.dev/nodemend/pkg/rungs"
)

// This file runs the ladder (pkg/repair/ladder) once a node is drained: the
// rung of the decision's position is carried out — an order to the node's
// agent (Reboot, ResetAccelerator) verified on the Node, the hand-over to
// the node's engine (Replace, steps.go), or quarantine — and a failed
// attempt moves the decision to the next attempt or rung. Every move is one
// Node patch guarded by the resourceVersion, and an order's name is derived
// from the decision, so that a restarted controller or a second leader
// neither orders twice nor runs two rungs at once.

// rungsOf is the ladder of node under pol for a fault with the given
// condition reason (the trigger's).
func (r *Reconciler) rungsOf(node *corev1.Node, pol policy.Policy, reason string) []policy.Rung {
	// The backend registry says whether an engine replaces the machine.
	replace := r.opts.ReplaceUnowned || r.backends.Choose(node, r.opts.Backend).Engine()
	return ladder.Resolve(pol, replace, reason)
}

// rungsOfRepair is the ladder of the repair recorded in st.
func (r *Reconciler) rungsOfRepair(node *corev1.Node, pol policy.Policy, st record.State) []policy.Rung {
	return r.rungsOf(node, pol, repairTrigger(st).Reason)
}

// attemptAt is the attempt at position p of rungs, decided now.
func attemptAt(rungs []policy.Rung, p ladder.Position, now time.Time) ladder.Attempt {
	rung := ladder.At(rungs, p)
	return ladder.Attempt{RungPosition: p, Action: rung.Action, Of: rung.Attempts, Started: metav1.NewTime(now),
		Timeout: metav1.Duration{Duration: rung.Timeout}}
}

// drained carries out the rung of a drained node.
func (r *Reconciler) drained(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, now time.Time) (reconcile.Result, error) {
	if st.Rung == nil {
		// A repair started before the ladder existed: it was a Replace.
		return r.handOver(ctx, node, st, now)
	}
	return r.carryOut(ctx, node, st, pol, *st.Rung, now)
}

// carryOut starts attempt a on a drained node, by who carries its rung out
// (pkg/rungs): the engine replaces the node, the controller quarantines it,
// the node's agent gets an order.
func (r *Reconciler) carryOut(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, a ladder.Attempt, now time.Time) (reconcile.Result, error) {
	rung, known := rungs.Lookup(a.Action)
	switch {
	case !known:
		// A record written by a newer controller, or by hand: a person
		// decides, as at the end of every ladder.
		return r.escalate(ctx, node, st, pol, a, fmt.Sprintf("%s is not a rung this controller knows", a.Action), now)
	case rung.By == rungs.Engine:
		if next := record.WithAttempt(st.Record, a); !equality.Semantic.DeepEqual(next, st.Record) {
			var err error
			if node, err = r.write(ctx, node, st.Record, next, true); err != nil {
				return reconcile.Result{}, err
			}
			st.Record = next
		}
		return r.handOver(ctx, node, st, now)
	case rung.By == rungs.Controller:
		return r.quarantine(ctx, node, st, a, now)
	}
	if r.opts.AgentSilence > 0 {
		if silent, why := ladder.AgentSilent(node, now, r.opts.AgentSilence); silent {
			return r.skipUnreachable(ctx, node, st, pol, a, why, now)
		}
	}
	a.Started = metav1.NewTime(now.UTC().Truncate(time.Second)) // as the record keeps it
	a.BootID = node.Status.NodeInfo.BootID
	a.Order = orderName(node, st.Started.Time, a)
	if !r.orders {
		return r.escalate(ctx, node, st, pol, a, "the NodeRemediation CRD is not installed (install or upgrade the chart's CRDs)", now)
	}
	if a.BootID == "" {
		// Nothing to verify a reboot by, nothing to bind an order to.
		return r.escalate(ctx, node, st, pol, a, "the node reports no boot ID (status.nodeInfo.bootID)", now)
	}
	next := record.Remediate(st.Record, a)
	updated, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.Record = next
	ctrl.LoggerFrom(ctx).Info("ladder: ordering "+string(a.Action), "position", a.RungPosition.String(), "order", a.Order, "bootID", a.BootID)
	return r.remediate(ctx, updated, st, pol, now)
}

// skipUnreachable moves a decision on an agent-executed rung of a node
// whose agent is silent past the rungs the agent carries out: an order
// nobody carries out would only wait out its timeout (15 minutes for a
// Reboot) before the ladder went on anyway. The move is recorded in one
// guarded patch, said in an event, and the rung landed on is carried out.
func (r *Reconciler) skipUnreachable(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, a ladder.Attempt, why string, now time.Time) (reconcile.Result, error) {
	rungs := r.rungsOfRepair(node, pol, st)
	p, skipped := ladder.SkipUnreachable(rungs, a.RungPosition, true)
	next := attemptAt(rungs, p, now)
	rec := record.WithAttempt(st.Record, next)
	updated, err := r.write(ctx, node, st.Record, rec, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.Record = rec
	msg := ladder.SkippedMessage(skipped, why, next.Action)
	for _, s := range skipped {
		r.metrics.Rung(string(s), "Skipped")
	}
	ctrl.LoggerFrom(ctx).Info("ladder: the node's agent is silent; skipping the rungs it carries out", "skipped", skipped, "why", why, "next", next.Action)
	r.emit(rungsSkippedEvent(updated, a, next, msg, rungCount(rungs)))
	return r.carryOut(ctx, updated, st, pol, next, now)
}

// orderName is the NodeRemediation of one attempt of one decision: the
// same whoever computes it, different for every attempt.
func orderName(node *corev1.Node, started time.Time, a ladder.Attempt) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d/%d/%d", node.UID, started.UTC().Format(time.RFC3339), a.Rung, a.Attempt, a.Started.UnixNano())))
	prefix := node.Name
	if len(prefix) > 200 {
		prefix = strings.TrimRight(prefix[:200], "-.")
	}
	short := strings.ToLower(string(a.Action))
	if rung, ok := rungs.Lookup(a.Action); ok {
		short = rung.Short
	}
	return prefix + "-" + short + "-" + hex.EncodeToString(h[:5])
}

// remediate follows an ordered attempt: the order is created (once), then
// judged on what the Node and the order show.
func (r *Reconciler) remediate(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, now time.Time) (reconcile.Result, error) {
	if halted, err := r.halted(ctx, node, st, now); halted || err != nil {
		return reconcile.Result{}, err
	}
	// A rung the node's agent carries out leaves the node out of service
	// for as long as the agent cannot act: a host that did not come back
	// from its reboot lets its volumes go.
	node, st, err := r.outOfService(ctx, node, st, pol, ladder.AgentExecuted(st.Rung.Action), now)
	if err != nil {
		return reconcile.Result{}, err
	}
	a := *st.Rung
	order := &v1alpha1.NodeRemediation{}
	err = r.client.Get(ctx, client.ObjectKey{Name: a.Order}, order)
	switch {
	case apierrors.IsNotFound(err):
		order = nil
		// Created once, within the order's life as the attempt started
		// it: one found missing late (a restart) never outlives its
		// attempt (pkg/repair/ladder.OrderSeconds).
		if secs, ok := ladder.OrderSeconds(a, now); ok {
			if err := r.createOrder(ctx, node, st, a, secs); err != nil {
				return reconcile.Result{}, err
			}
		}
	case err != nil:
		return reconcile.Result{}, err
	}
	obs := ladder.Observation{Now: now, BootID: node.Status.NodeInfo.BootID, Order: order,
		TriggerHealthy: triggerHealthy(node, pol, repairTrigger(st).Type), KubeletReady: kubeletReady(node)}
	out := ladder.Judge(a, obs)
	switch out.Verdict {
	case ladder.Wait:
		wakeAt(ctx, out.Wake)
		return reconcile.Result{}, nil
	case ladder.Rebooted:
		a.Verified = metav1.NewTime(now)
		if _, err := r.write(ctx, node, st.Record, record.WithAttempt(st.Record, a), true); err != nil {
			return reconcile.Result{}, err
		}
		r.metrics.Rung(string(a.Action), "Rebooted")
		ctrl.LoggerFrom(ctx).Info("ladder: reboot verified by a new boot ID", "was", a.BootID, "now", obs.BootID)
		r.emit(rebootVerifiedEvent(node, a, obs.BootID, rungCount(r.rungsOfRepair(node, pol, st))))
		wakeAt(ctx, out.Wake)
		return reconcile.Result{}, nil
	case ladder.Repaired:
		return r.returnToService(ctx, node, st, pol, a, out.Message, now)
	}
	return r.escalate(ctx, node, st, pol, a, out.Message, now)
}

// createOrder creates the attempt's NodeRemediation unless it exists: the
// name is the decision's, so a second try (after a crash, or by another
// leader) finds it instead of ordering again.
func (r *Reconciler) createOrder(ctx context.Context, node *corev1.Node, st record.State, a ladder.Attempt, deadlineSeconds int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	trigger := repairTrigger(st)
	rung, _ := rungs.Lookup(a.Action) // an agent rung: carryOut checked it
	host := rung.Order
	o := &v1alpha1.NodeRemediation{
		ObjectMeta: metav1.ObjectMeta{Name: a.Order, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		}}},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: node.Name, Action: host, BootID: a.BootID, Reason: trigger.String(), Trigger: &trigger,
			ActiveDeadlineSeconds: deadlineSeconds},
	}
	err := r.client.Create(ctx, o)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ordering %s: %w", a.Action, err)
	}
	r.metrics.Rung(string(a.Action), "Ordered")
	r.emit(orderedEvent(node, a, o))
	return nil
}

// triggerHealthy: no rule of pol matches the node's condition of type t.
func triggerHealthy(node *corev1.Node, pol policy.Policy, t corev1.NodeConditionType) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == t && unhealthy.Any([]corev1.NodeCondition{c}, pol.Rules) {
			return false
		}
	}
	return true
}

// escalate moves a decision whose attempt failed to the next attempt or
// rung, and carries that out.
func (r *Reconciler) escalate(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, failed ladder.Attempt, why string, now time.Time) (reconcile.Result, error) {
	rungs := r.rungsOfRepair(node, pol, st)
	next := attemptAt(rungs, ladder.Next(rungs, failed.RungPosition), now)
	// Recorded first, in one guarded patch: the failure is reported once
	// and the next attempt decided once.
	rec := record.WithAttempt(st.Record, next)
	updated, err := r.write(ctx, node, st.Record, rec, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.Record = rec
	r.metrics.Rung(string(failed.Action), "Failed")
	ctrl.LoggerFrom(ctx).Info("ladder: attempt failed; going on", "failed", failed.Action, "position", failed.RungPosition.String(), "why", why, "next", next.Action)
	r.emit(remediationFailedEvent(updated, failed, next, why, rungCount(rungs)))
	return r.carryOut(ctx, updated, st, pol, *rec.Rung, now)
}

// returnToService ends a verified attempt: taint and repair state removed,
// the record kept for the rung's window.
func (r *Reconciler) returnToService(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, a ladder.Attempt, msg string, now time.Time) (reconcile.Result, error) {
	rungs := r.rungsOfRepair(node, pol, st)
	rec := &ladder.Record{RungPosition: a.RungPosition, Action: a.Action, Condition: repairTrigger(st).Type, Returned: metav1.NewTime(now),
		Until: metav1.NewTime(now.Add(ladder.At(rungs, a.RungPosition).Window))}
	next := record.Return(rec)
	updated, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	rec = next.Ladder
	r.untrack(node.Name)
	r.metrics.Rung(string(a.Action), "Repaired")
	ctrl.LoggerFrom(ctx).Info("ladder: node back in service", "action", a.Action, "how", msg, "window", rec.Until.Sub(now).String())
	r.emit(returnedEvent(updated, st, a, msg, rec, rungCount(rungs)))
	wakeAt(ctx, rec.Until.Time)
	return reconcile.Result{}, nil
}

// quarantine cordons and keeps the node tainted for a person.
func (r *Reconciler) quarantine(ctx context.Context, node *corev1.Node, st record.State, a ladder.Attempt, now time.Time) (reconcile.Result, error) {
	next := record.Quarantine(st.Record, a, !node.Spec.Unschedulable, now)
	updated, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.metrics.Rung(string(a.Action), "Quarantined")
	ctrl.LoggerFrom(ctx).Info("ladder: node quarantined for a person", "trigger", repairTrigger(st).String())
	r.emit(quarantinedEvent(updated, st, a))
	return reconcile.Result{}, nil
}

// quarantined follows a quarantined node until a person releases it or it
// has been healthy for the policy's healthyFor.
func (r *Reconciler) quarantined(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, now time.Time) (reconcile.Result, error) {
	node, st, err := r.outOfService(ctx, node, st, pol, true, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	healthy := !unhealthy.Any(node.Status.Conditions, pol.Rules)
	if st.Released {
		who := st.Release
		if who == "" {
			who = "the " + record.ReleaseAnnotation + " annotation"
		}
		if !healthy {
			// A return to service needs its evidence, whoever asks: the
			// node's status (its kubelet's and agent's) showing no fault.
			// The API server admits nodemend's uncordon on no less
			// (docs/security.md). The request stays until then.
			if r.emit(releaseWaitingEvent(node, who)) {
				ctrl.LoggerFrom(ctx).Info("release requested; waiting for the node's conditions to be healthy", "by", who)
			}
			return reconcile.Result{}, nil // the status's change wakes the node
		}
		return r.release(ctx, node, st, "released by "+who)
	}
	hold := ladder.Quarantined(healthy, st.HealthySince.Time, pol.QuarantineHealthyFor, now)
	if hold.Release {
		return r.release(ctx, node, st, fmt.Sprintf("healthy for %s", pol.QuarantineHealthyFor))
	}
	if !hold.HealthySince.Equal(st.HealthySince.Time) {
		if _, err := r.write(ctx, node, st.Record, record.WithHealthySince(st.Record, hold.HealthySince), true); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !hold.Wake.IsZero() {
		wakeAt(ctx, hold.Wake)
	}
	return reconcile.Result{}, nil
}

// release returns a quarantined node to service; the next fault starts a
// new ladder.
func (r *Reconciler) release(ctx context.Context, node *corev1.Node, st record.State, why string) (reconcile.Result, error) {
	updated, err := r.write(ctx, node, st.Record, record.Return(nil), true)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.untrack(node.Name)
	r.metrics.Rung(string(v1alpha1.LadderQuarantine), "Released")
	ctrl.LoggerFrom(ctx).Info("ladder: quarantine released", "why", why)
	r.emit(releasedEvent(updated, st, why))
	return reconcile.Result{}, nil
}

// untrack forgets a repair that ended with the node still there.
func (r *Reconciler) untrack(name string) {
	r.mu.Lock()
	delete(r.inflight, name)
	r.mu.Unlock()
	r.dedupe.forget(name)
}

// ladderWindow handles the record of an attempt that returned the node to
// service: it is removed when its window ends. It reports whether the
// node's fault came back within the window (then the decision goes on
// without a new toleration), with the finding that did.
// st's record follows the write.
func (r *Reconciler) ladderWindow(ctx context.Context, node *corev1.Node, st *record.State, asmt unhealthy.Assessment, now time.Time) (*corev1.Node, *unhealthy.Finding, error) {
	rec := st.Ladder
	if rec == nil {
		return node, nil, nil
	}
	if !now.Before(rec.Until.Time) {
		next := record.WithoutLadder(st.Record)
		updated, err := r.write(ctx, node, st.Record, next, false)
		if err != nil {
			return node, nil, err
		}
		st.Record = next
		return updated, nil, nil
	}
	for i := range asmt.Findings {
		if asmt.Findings[i].Condition.Type == rec.Condition {
			return node, &asmt.Findings[i], nil
		}
	}
	wakeAt(ctx, rec.Until.Time)
	return node, nil, nil
}

func rungCount(rungs []policy.Rung) int { return len(rungs) }
