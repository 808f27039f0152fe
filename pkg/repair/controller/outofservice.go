package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/outofservice"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// outOfService puts Kubernetes' out-of-service taint on a node the ladder
// leaves out of service (quarantined, or on an agent-executed rung whose
// agent went silent) once its kubelet and agent are gone past the drain
// deadline, so that the controller-manager force-deletes its pods and
// detaches their volumes (pkg/repair/outofservice); and takes it off when
// the kubelet is Ready again. The taint is recorded in the repair record
// and written with it: only a taint nodemend put is taken off. It returns
// the node as written and its state.
func (r *Reconciler) outOfService(ctx context.Context, node *corev1.Node, st record.State, pol policy.Policy, leftOut bool, now time.Time) (*corev1.Node, record.State, error) {
	silent := false
	var heartbeat time.Time
	if r.opts.AgentSilence > 0 {
		silent, _ = ladder.AgentSilent(node, now, r.opts.AgentSilence)
		heartbeat = ladder.AgentHeartbeat(node)
	}
	act, why := outofservice.Decide(outofservice.Input{Node: node, OutOfService: leftOut, AgentSilent: silent,
		Started: st.Started.Time, DrainDeadline: pol.Drain.Deadline, Now: now})
	var next record.Record
	switch {
	case act == outofservice.Add:
		next = record.WithOutOfService(st.Record, now)
	case act == outofservice.Remove && !st.OutOfService.IsZero():
		next = record.WithOutOfService(st.Record, time.Time{})
	default:
		if leftOut && st.OutOfService.IsZero() && outofservice.KubeletGone(node) {
			// Nothing on the node changes when the agent's silence or
			// the drain deadline passes: wake then.
			at := st.Started.Add(pol.Drain.Deadline)
			if !heartbeat.IsZero() {
				at = maxTime(at, heartbeat.Add(r.opts.AgentSilence+time.Second))
			}
			if at.After(now) {
				wakeAt(ctx, at)
			}
		}
		return node, st, nil
	}
	updated, err := r.write(ctx, node, st.Record, next, true)
	if err != nil {
		return node, st, err
	}
	st.Record = next
	ctrl.LoggerFrom(ctx).Info("out-of-service taint", "added", act == outofservice.Add, "why", why)
	r.emit(outOfServiceEvent(updated, act == outofservice.Add, why))
	return updated, st, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
