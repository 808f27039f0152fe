// Package record is the repair of one node, as steps whose every result is
// recorded on the Node object, so that a restarted controller or a new leader
// resumes exactly where the last one stopped:
//
//	(healthy) ──unhealthy──► unhealthy-since recorded
//	          ──toleration passed (or repair-now), gate open──► Draining (taint + record, one patch)
//	          ──pods gone or deadline──►        Terminating (record with the backend's target, one patch)
//	          ──target deleted──►               (node gone: done)
//
// The ladder (pkg/repair/ladder) adds two phases after the drain, for
// nodes whose rung is not Replace: Remediating (a reboot or an accelerator
// reset ordered through a NodeRemediation, until verified — then the node
// returns to service — or failed — then the next rung) and Quarantined
// (cordoned and tainted until a person releases the node, or it has been
// healthy long enough).
//
// The state is one v1alpha1.RepairRecord in one annotation. This package is
// pure: reading it (Read), the steps as functions from record to record, and
// Apply, which puts a record on a copy of the Node with the taint and cordon
// that go with it. pkg/repair/drainpass does the I/O of the drain;
// pkg/repair/controller writes each step.
package record

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/outofservice"
	"nodemend.dev/nodemend/pkg/repair/record/legacy"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// The repair's marks on a Node; v1alpha1 holds the strings, these names
// are kept for the packages that used them.
const (
	// StateAnnotation holds the RepairRecord.
	StateAnnotation = v1alpha1.RepairStateAnnotation
	// TaintKey marks a node under repair; NoSchedule keeps new pods away
	// while the drain moves the others with the Eviction API.
	TaintKey = v1alpha1.RepairTaintKey
	// VetoAnnotation, set by a person, stops nodemend from starting or
	// continuing a repair.
	VetoAnnotation = v1alpha1.VetoAnnotation
	// ReleaseAnnotation, set by a person, returns a quarantined node to
	// service.
	ReleaseAnnotation = v1alpha1.ReleaseAnnotation
	// RepairNowAnnotation, set by a person, asks for the repair now.
	RepairNowAnnotation = v1alpha1.RepairNowAnnotation
)

// Record is the repair state kept on a Node.
type Record = v1alpha1.RepairRecord

// Phase is the repair step a node is in.
type Phase = v1alpha1.RepairPhase

// The phases.
const (
	PhaseNone        = v1alpha1.RepairPhaseNone
	PhaseDraining    = v1alpha1.RepairPhaseDraining
	PhaseTerminating = v1alpha1.RepairPhaseTerminating
	PhaseRemediating = v1alpha1.RepairPhaseRemediating
	PhaseQuarantined = v1alpha1.RepairPhaseQuarantined
)

// State is what a reconcile reads on a node: the record, and the marks
// others set beside it.
type State struct {
	Record
	// Since is the record's UnhealthySince, in the form pkg/repair/unhealthy
	// computes with.
	Since unhealthy.Since
	// Legacy: the node carries the previous release's annotations (the
	// record was converted from them unless the node has one already); the
	// first write removes them.
	Legacy bool

	// The person's acts, with their values: the veto, the release and the
	// repair-now request (RepairRequest; the record's RepairNow is the
	// request a repair consumed).
	Vetoed, Released, RepairRequested bool
	Veto, Release, RepairRequest      string

	// Tainted: the node carries the repair taint.
	Tainted bool
}

// Read returns the state recorded on node. A record that does not decode
// is an error: the caller reports it and leaves the node alone, rather than
// guess.
func Read(node *corev1.Node) (State, error) {
	a := node.Annotations
	var s State
	var err error
	s.Legacy = legacy.Present(a)
	if v, ok := a[StateAnnotation]; ok {
		s.Record, err = v1alpha1.DecodeRepairRecord(v)
	} else if s.Legacy {
		s.Record, err = legacy.Convert(node)
	}
	if err != nil {
		return State{}, err
	}
	s.Since = make(unhealthy.Since, len(s.UnhealthySince))
	for k, v := range s.UnhealthySince {
		s.Since[k] = v.Time
	}
	s.Veto, s.Vetoed = a[VetoAnnotation]
	s.Release, s.Released = a[ReleaseAnnotation]
	s.RepairRequest, s.RepairRequested = a[RepairNowAnnotation]
	s.Tainted = HasTaint(node)
	return s, nil
}

// InRepair reports whether node is under repair, for counters over the
// whole fleet: only a node that carries a record (or the previous
// release's annotations) is decoded. A record that does not decode counts
// as a repair: the controller leaves such a node alone, and the safety gate
// had better count it.
func InRepair(node *corev1.Node) bool {
	v, ok := node.Annotations[StateAnnotation]
	if !ok {
		return legacy.InRepair(node.Annotations)
	}
	r, err := v1alpha1.DecodeRepairRecord(v)
	return err != nil || r.InRepair()
}

// PhaseOf is the phase of node's repair, "" when none or unreadable.
func PhaseOf(node *corev1.Node) Phase {
	s, err := Read(node)
	if err != nil {
		return PhaseNone
	}
	return s.Phase
}

// HasTaint reports whether node carries the repair taint.
func HasTaint(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == TaintKey {
			return true
		}
	}
	return false
}

// Taint is the repair taint; its value names the condition.
func Taint(condition corev1.NodeConditionType) corev1.Taint {
	return corev1.Taint{Key: TaintKey, Value: string(condition), Effect: corev1.TaintEffectNoSchedule}
}

// stamp is a time as the record keeps it: UTC, whole seconds (what its
// JSON holds, so that a record in memory equals the one read back).
func stamp(t time.Time) metav1.Time { return metav1.NewTime(t.UTC().Truncate(time.Second)) }

func sinceRecord(since unhealthy.Since) map[corev1.NodeConditionType]metav1.Time {
	if len(since) == 0 {
		return nil
	}
	out := make(map[corev1.NodeConditionType]metav1.Time, len(since))
	for k, v := range since {
		out[k] = stamp(v)
	}
	return out
}

// The steps. Each returns the record that follows r; none reads a clock or
// the API.

// WithSince is r with its unhealthy-since record set to since (removed when
// empty).
func WithSince(r Record, since unhealthy.Since) Record {
	r.UnhealthySince = sinceRecord(since)
	return r
}

// Start is the record of a repair started at now (PhaseDraining): the
// trigger, its policy, the ladder attempt it begins with, and the person's
// request that asked for it (nil: its toleration passed). since is kept,
// so that the record of the fault survives; the ladder's window, if any,
// was consumed by this decision.
func Start(r Record, since unhealthy.Since, trigger corev1.NodeCondition, policyName string, attempt v1alpha1.RungAttempt, now time.Time, repairNow *v1alpha1.RepairNowRequest) Record {
	t := v1alpha1.TriggerOf(trigger)
	attempt.Started = stamp(attempt.Started.Time)
	return Record{Phase: PhaseDraining, UnhealthySince: sinceRecord(since), Trigger: &t, Policy: policyName,
		Started: stamp(now), Rung: &attempt, RepairNow: repairNow}
}

// RepairNowAt is the acknowledgment of a person's repair-now request
// consumed at now.
func RepairNowAt(request string, now time.Time) *v1alpha1.RepairNowRequest {
	return &v1alpha1.RepairNowRequest{Request: request, At: stamp(now)}
}

// HandOver is r handed to its backend at now (PhaseTerminating).
func HandOver(r Record, target v1alpha1.RepairTarget, now time.Time) Record {
	r.Phase, r.Drained, r.Target = PhaseTerminating, stamp(now), &target
	return r
}

// Fail is r with its failure recorded at now.
func Fail(r Record, now time.Time) Record {
	r.Failed = stamp(now)
	return r
}

// Remediate is r waiting for the order of attempt (PhaseRemediating).
func Remediate(r Record, attempt v1alpha1.RungAttempt) Record {
	r.Phase = PhaseRemediating
	return WithAttempt(r, attempt)
}

// WithAttempt is r with attempt recorded (the phase unchanged).
func WithAttempt(r Record, attempt v1alpha1.RungAttempt) Record {
	attempt.Started, attempt.Verified = stamp(attempt.Started.Time), stampIfSet(attempt.Verified)
	r.Rung = &attempt
	return r
}

func stampIfSet(t metav1.Time) metav1.Time {
	if t.IsZero() {
		return t
	}
	return stamp(t.Time)
}

// Quarantine is r quarantined at now for attempt (PhaseQuarantined).
// schedulable says whether the node was schedulable: only then is the
// cordon nodemend's, and lifted by the return to service.
func Quarantine(r Record, attempt v1alpha1.RungAttempt, schedulable bool, now time.Time) Record {
	r = WithAttempt(r, attempt)
	r.Phase, r.Quarantined = PhaseQuarantined, stamp(now)
	r.Cordoned = r.Cordoned || schedulable
	return r
}

// WithHealthySince is r with the quarantine's healthy record set (zero:
// removed).
func WithHealthySince(r Record, t time.Time) Record {
	r.HealthySince = metav1.Time{}
	if !t.IsZero() {
		r.HealthySince = stamp(t)
	}
	return r
}

// WithOutOfService records that nodemend put the out-of-service taint on
// the node at t (zero: took it off); Apply writes the taint to match.
func WithOutOfService(r Record, t time.Time) Record {
	r.OutOfService = metav1.Time{}
	if !t.IsZero() {
		r.OutOfService = stamp(t)
	}
	return r
}

// Return is the record of a node back in service: nothing of the repair,
// and rec kept for its window (nil: none, the next fault starts a new
// ladder).
func Return(rec *v1alpha1.LadderRecord) Record {
	if rec != nil {
		c := *rec
		c.Returned, c.Until = stamp(c.Returned.Time), stamp(c.Until.Time)
		rec = &c
	}
	return Record{Ladder: rec}
}

// WithoutLadder is r without its ladder record (its window ended).
func WithoutLadder(r Record) Record {
	r.Ladder = nil
	return r
}

// Apply returns a copy of node that carries next, the record that follows
// prev: the annotation (removed for the zero record), the repair taint
// while a repair runs, nodemend's cordon while next records one. Where a
// repair starts, the person's repair-now request is consumed; where it ends
// with the node still there, the taint goes, nodemend's cordon is lifted and
// the person's release and repair-now are consumed. The previous release's
// annotations are removed in the same write.
func Apply(node *corev1.Node, prev, next Record) *corev1.Node {
	n := node.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if v := next.Encode(); v != "" {
		n.Annotations[StateAnnotation] = v
	} else {
		delete(n.Annotations, StateAnnotation)
	}
	for _, k := range legacy.Keys() {
		delete(n.Annotations, k)
	}
	switch {
	case next.InRepair():
		if !HasTaint(n) {
			n.Spec.Taints = append(n.Spec.Taints, Taint(next.Trigger.Type))
		}
		if !prev.InRepair() {
			delete(n.Annotations, RepairNowAnnotation)
		}
	case prev.InRepair():
		taints := n.Spec.Taints[:0:0]
		for _, t := range n.Spec.Taints {
			if t.Key != TaintKey {
				taints = append(taints, t)
			}
		}
		n.Spec.Taints = taints
		if prev.Cordoned && !next.Cordoned {
			n.Spec.Unschedulable = false
		}
		delete(n.Annotations, ReleaseAnnotation)
		delete(n.Annotations, RepairNowAnnotation)
	}
	if next.Cordoned {
		n.Spec.Unschedulable = true
	}
	// The out-of-service taint follows the record: put while it says so,
	// taken off when it stops saying so (the kubelet is back, or the
	// repair ended). A taint nodemend did not put is left alone.
	switch {
	case !next.OutOfService.IsZero() && !outofservice.Has(n):
		n.Spec.Taints = append(n.Spec.Taints, outofservice.Taint())
	case next.OutOfService.IsZero() && !prev.OutOfService.IsZero():
		taints := n.Spec.Taints[:0:0]
		for _, t := range n.Spec.Taints {
			if t.Key != outofservice.TaintKey {
				taints = append(taints, t)
			}
		}
		n.Spec.Taints = taints
	}
	if len(n.Annotations) == 0 {
		n.Annotations = nil
	}
	return n
}

// WithoutRepairNow returns a copy of node whose repair-now request is
// consumed without a repair (it was refused).
func WithoutRepairNow(node *corev1.Node) *corev1.Node {
	n := node.DeepCopy()
	delete(n.Annotations, RepairNowAnnotation)
	return n
}
