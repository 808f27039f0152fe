package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"nodemend.dev/nodemend/pkg/repair/record"
)

// A person's repair-now request (v1alpha1.RepairNowAnnotation) waives the
// toleration of a node that its policy finds unhealthy; everything else —
// the gates, the ladder — applies as to any repair (decide.go). The repair
// that starts consumes it in its first write (record.Apply). This file is
// the other answer: a request nodemend will not carry out.

// refuseRepairNow consumes a request that will not be carried out — the
// node is healthy under its policy, or its policy only counts it — and
// reports why. The removal is guarded by the resourceVersion, so that a
// request set again meanwhile is read again rather than dropped unseen.
func (r *Reconciler) refuseRepairNow(ctx context.Context, node *corev1.Node, st record.State, why string) error {
	if r.opts.DryRun {
		if r.dedupe.first(node.Name, keyRepairNowDryRun, st.RepairRequest) {
			ctrl.LoggerFrom(ctx).Info("dry run: would refuse the repair-now request", "request", st.RepairRequest, "why", why)
		}
		return nil
	}
	if err := r.patch(ctx, node, record.WithoutRepairNow(node), true); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("repair-now request refused", "request", st.RepairRequest, "why", why)
	r.emit(repairNowRefusedEvent(node, st.RepairRequest, why))
	return nil
}

// keyRepairNowDryRun dedups the dry run's log line of a refused request.
const keyRepairNowDryRun = "repair-now-dry-run"
