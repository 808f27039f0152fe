// Package workflow is the repair of one node, as steps whose every result is
// recorded on the Node object, so that a restarted controller or a new leader
// resumes exactly where the last one stopped:
//
//	(healthy) ──unhealthy──► unhealthy-since recorded
//	          ──toleration passed, gate open──► Draining   (taint + phase + start time, one patch)
//	          ──pods gone or deadline──►        Terminating (phase + the backend's target, one patch)
//	          ──target deleted──►               (node gone: done)
//
// The ladder (pkg/repair/ladder) adds two phases after the drain, for
// nodes whose rung is not Replace: Remediating (a reboot or an accelerator
// reset ordered through a NodeRemediation, until verified — then the node
// returns to service — or failed — then the next rung) and Quarantined
// (cordoned and tainted until a person releases the node, or it has been
// healthy long enough).
//
// This file is the pure part: the annotations and taint, reading them and
// computing the next version of the node. drain.go does the I/O of the drain;
// pkg/repair/controller writes each step.
package workflow

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// The API of the repair state on a Node. Treat every string as versioned:
// other tools (kubectl mend, dashboards) read them.
const (
	Prefix = "nodemend.dev/"

	// UnhealthySinceAnnotation records, per condition type, since when the
	// controller considers the node unhealthy (JSON of RFC 3339 times).
	UnhealthySinceAnnotation = Prefix + "unhealthy-since"
	// PhaseAnnotation is the repair step the node is in.
	PhaseAnnotation = Prefix + "repair-phase"
	// StartedAnnotation is when the repair started (taint), RFC 3339.
	StartedAnnotation = Prefix + "repair-started"
	// ReasonAnnotation says which condition triggered the repair.
	ReasonAnnotation = Prefix + "repair-reason"
	// PolicyAnnotation is the NodeRepairPolicy in force when it started.
	PolicyAnnotation = Prefix + "repair-policy"
	// DrainedAnnotation is when the drain ended and the node was handed
	// to its backend, RFC 3339.
	DrainedAnnotation = Prefix + "repair-drained"
	// TargetAnnotation is the object the backend deletes (JSON).
	TargetAnnotation = Prefix + "repair-target"
	// FailedAnnotation is when the repair was reported failed (the node
	// outlived its termination timeout), so that it is reported once.
	FailedAnnotation = Prefix + "repair-failed"

	// AttemptAnnotation is the ladder rung attempt of the repair (JSON of
	// ladder.Attempt): its position from the start, its order once made.
	AttemptAnnotation = Prefix + "repair-rung"
	// LadderAnnotation is kept after an attempt returned the node to
	// service (JSON of ladder.Record), until its window ends.
	LadderAnnotation = Prefix + "repair-ladder"
	// QuarantinedAnnotation is when the node was quarantined, RFC 3339.
	QuarantinedAnnotation = Prefix + "quarantined"
	// HealthySinceAnnotation is since when a quarantined node has been
	// healthy, RFC 3339; it is released after the policy's healthyFor.
	HealthySinceAnnotation = Prefix + "quarantine-healthy-since"
	// CordonedAnnotation says that nodemend cordoned the node (it was
	// schedulable before): only then does the release uncordon it.
	CordonedAnnotation = Prefix + "cordoned"
	// ReleaseAnnotation, set by a person (kubectl mend release NODE),
	// returns a quarantined node to service. Its value says who or why.
	ReleaseAnnotation = Prefix + "release"

	// VetoAnnotation, set by a human on a Node, stops nodemend from
	// starting or continuing its repair. Its value is the reason.
	VetoAnnotation = Prefix + "do-not-repair"

	// TaintKey marks a node under repair; NoSchedule keeps new pods away
	// while the drain moves the others with the Eviction API.
	TaintKey = Prefix + "repair"
)

// Phase is the repair step a node is in.
type Phase string

const (
	// PhaseNone: no repair in progress.
	PhaseNone Phase = ""
	// PhaseDraining: tainted, pods are being moved off.
	PhaseDraining Phase = "Draining"
	// PhaseTerminating: handed to the backend; done when the node is gone.
	PhaseTerminating Phase = "Terminating"
	// PhaseRemediating: a reboot or reset is ordered; waiting for it to be
	// verified.
	PhaseRemediating Phase = "Remediating"
	// PhaseQuarantined: cordoned and tainted for a person.
	PhaseQuarantined Phase = "Quarantined"
)

// State is the repair state recorded on a node.
type State struct {
	Phase     Phase
	Since     unhealthy.Since
	Started   time.Time
	Reason    string
	Condition corev1.NodeConditionType
	Policy    string
	Drained   time.Time
	Target    *backend.Target
	Failed    time.Time
	Vetoed    bool
	Veto      string
	Tainted   bool
	// Attempt is the ladder position and, once ordered, the order; nil for
	// repairs started before the ladder (they are Replace).
	Attempt *ladder.Attempt
	// Ladder is the record of the last attempt that returned the node to
	// service, while its window runs.
	Ladder       *ladder.Record
	Quarantined  time.Time
	HealthySince time.Time
	Release      string
	Released     bool
}

// InRepair reports whether a repair has started.
func (s State) InRepair() bool { return s.Phase != PhaseNone }

// Read returns the state recorded on node. A malformed value is an error:
// the caller reports it and leaves the node alone, rather than guess.
func Read(node *corev1.Node) (State, error) {
	a := node.Annotations
	var s State
	var err error
	if s.Since, err = unhealthy.ParseSince(a[UnhealthySinceAnnotation]); err != nil {
		return State{}, err
	}
	switch p := Phase(a[PhaseAnnotation]); p {
	case PhaseNone, PhaseDraining, PhaseTerminating, PhaseRemediating, PhaseQuarantined:
		s.Phase = p
	default:
		return State{}, fmt.Errorf("unknown %s %q", PhaseAnnotation, p)
	}
	if s.Started, err = parseTime(a, StartedAnnotation); err != nil {
		return State{}, err
	}
	if s.Drained, err = parseTime(a, DrainedAnnotation); err != nil {
		return State{}, err
	}
	if s.Failed, err = parseTime(a, FailedAnnotation); err != nil {
		return State{}, err
	}
	if v, ok := a[TargetAnnotation]; ok {
		t, err := backend.DecodeTarget(v)
		if err != nil {
			return State{}, err
		}
		s.Target = &t
	}
	if v, ok := a[AttemptAnnotation]; ok {
		if s.Attempt, err = ladder.DecodeAttempt(v); err != nil {
			return State{}, err
		}
	}
	if v, ok := a[LadderAnnotation]; ok {
		if s.Ladder, err = ladder.DecodeRecord(v); err != nil {
			return State{}, err
		}
	}
	if s.Quarantined, err = parseTime(a, QuarantinedAnnotation); err != nil {
		return State{}, err
	}
	if s.HealthySince, err = parseTime(a, HealthySinceAnnotation); err != nil {
		return State{}, err
	}
	s.Release, s.Released = a[ReleaseAnnotation]
	// Remediating with an attempt that has no order yet is the moment
	// after a failed attempt's successor was decided: the controller
	// carries it out.
	if s.Phase == PhaseRemediating && s.Attempt == nil {
		return State{}, fmt.Errorf("%s is %s but %s is missing", PhaseAnnotation, s.Phase, AttemptAnnotation)
	}
	if s.Phase != PhaseNone && s.Started.IsZero() {
		return State{}, fmt.Errorf("%s is %s but %s is missing", PhaseAnnotation, s.Phase, StartedAnnotation)
	}
	if s.Phase == PhaseTerminating && s.Target == nil {
		return State{}, fmt.Errorf("%s is %s but %s is missing", PhaseAnnotation, s.Phase, TargetAnnotation)
	}
	s.Reason = a[ReasonAnnotation]
	s.Policy = a[PolicyAnnotation]
	s.Condition = corev1.NodeConditionType(conditionOf(s.Reason))
	s.Veto, s.Vetoed = a[VetoAnnotation]
	s.Tainted = HasTaint(node)
	return s, nil
}

func parseTime(a map[string]string, key string) (time.Time, error) {
	v, ok := a[key]
	if !ok || v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", key, err)
	}
	return t, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Reason formats what triggered a repair: "Type=Status/Reason".
func Reason(c corev1.NodeCondition) string {
	s := string(c.Type) + "=" + string(c.Status)
	if c.Reason != "" {
		s += "/" + c.Reason
	}
	return s
}

func conditionOf(reason string) string {
	for i := range len(reason) {
		if reason[i] == '=' {
			return reason[:i]
		}
	}
	return reason
}

// ConditionReason returns the condition's reason from a Reason string, for
// metric labels.
func ConditionReason(reason string) string {
	for i := range len(reason) {
		if reason[i] == '/' {
			return reason[i+1:]
		}
	}
	return ""
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

// WithSince returns a copy of node whose unhealthy-since record is since
// (removed when empty).
func WithSince(node *corev1.Node, since unhealthy.Since) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, UnhealthySinceAnnotation, since.String())
	return n
}

// Started returns a copy of node in PhaseDraining: tainted, with the start
// time, trigger and policy recorded. since is written too, so that the
// record of the fault survives in the same patch.
func Started(node *corev1.Node, since unhealthy.Since, trigger corev1.NodeCondition, policyName string, attempt ladder.Attempt, now time.Time) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, AttemptAnnotation, ladder.Encode(attempt))
	delete(n.Annotations, LadderAnnotation) // this decision consumed it
	setAnnotation(n, UnhealthySinceAnnotation, since.String())
	setAnnotation(n, PhaseAnnotation, string(PhaseDraining))
	setAnnotation(n, StartedAnnotation, formatTime(now))
	setAnnotation(n, ReasonAnnotation, Reason(trigger))
	setAnnotation(n, PolicyAnnotation, policyName)
	EnsureTaint(n, trigger.Type)
	return n
}

// EnsureTaint adds the repair taint to n (in place) unless it has one.
func EnsureTaint(n *corev1.Node, condition corev1.NodeConditionType) {
	if !HasTaint(n) {
		n.Spec.Taints = append(n.Spec.Taints, Taint(condition))
	}
}

// HandedOver returns a copy of node in PhaseTerminating with its target.
func HandedOver(node *corev1.Node, target backend.Target, now time.Time) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, PhaseAnnotation, string(PhaseTerminating))
	setAnnotation(n, DrainedAnnotation, formatTime(now))
	setAnnotation(n, TargetAnnotation, target.Encode())
	return n
}

// MarkedFailed returns a copy of node with the failure time recorded.
func MarkedFailed(node *corev1.Node, now time.Time) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, FailedAnnotation, formatTime(now))
	return n
}

func setAnnotation(n *corev1.Node, key, value string) {
	if value == "" {
		delete(n.Annotations, key)
		return
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
}

// Remediating returns a copy of node waiting for the order of attempt.
func Remediating(node *corev1.Node, attempt ladder.Attempt) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, PhaseAnnotation, string(PhaseRemediating))
	setAnnotation(n, AttemptAnnotation, ladder.Encode(attempt))
	return n
}

// WithAttempt returns a copy of node with attempt recorded (the phase
// unchanged).
func WithAttempt(node *corev1.Node, attempt ladder.Attempt) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, AttemptAnnotation, ladder.Encode(attempt))
	return n
}

// Quarantine returns a copy of node quarantined at now: cordoned (recorded
// when nodemend did it, so that only then the release uncordons), tainted,
// in PhaseQuarantined.
func Quarantine(node *corev1.Node, attempt ladder.Attempt, condition corev1.NodeConditionType, now time.Time) *corev1.Node {
	n := node.DeepCopy()
	setAnnotation(n, PhaseAnnotation, string(PhaseQuarantined))
	setAnnotation(n, AttemptAnnotation, ladder.Encode(attempt))
	setAnnotation(n, QuarantinedAnnotation, formatTime(now))
	if !n.Spec.Unschedulable {
		n.Spec.Unschedulable = true
		setAnnotation(n, CordonedAnnotation, "true")
	}
	EnsureTaint(n, condition)
	return n
}

// WithHealthySince returns a copy of node with the quarantine's healthy
// record set (zero: removed).
func WithHealthySince(node *corev1.Node, t time.Time) *corev1.Node {
	n := node.DeepCopy()
	v := ""
	if !t.IsZero() {
		v = formatTime(t)
	}
	setAnnotation(n, HealthySinceAnnotation, v)
	return n
}

// Returned returns a copy of node back in service: the repair's taint,
// annotations and (if nodemend set it) cordon removed, and rec kept for its
// window (nil: none, the next fault starts a new ladder).
func Returned(node *corev1.Node, rec *ladder.Record) *corev1.Node {
	n := node.DeepCopy()
	for _, k := range []string{UnhealthySinceAnnotation, PhaseAnnotation, StartedAnnotation, ReasonAnnotation, PolicyAnnotation,
		DrainedAnnotation, TargetAnnotation, FailedAnnotation, AttemptAnnotation, QuarantinedAnnotation, HealthySinceAnnotation,
		ReleaseAnnotation} {
		delete(n.Annotations, k)
	}
	if n.Annotations[CordonedAnnotation] != "" {
		n.Spec.Unschedulable = false
		delete(n.Annotations, CordonedAnnotation)
	}
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key != TaintKey {
			taints = append(taints, t)
		}
	}
	n.Spec.Taints = taints
	if rec != nil {
		setAnnotation(n, LadderAnnotation, ladder.Encode(*rec))
	} else {
		delete(n.Annotations, LadderAnnotation)
	}
	return n
}

// WithoutLadder returns a copy of node whose ladder record is gone (its
// window ended).
func WithoutLadder(node *corev1.Node) *corev1.Node {
	n := node.DeepCopy()
	delete(n.Annotations, LadderAnnotation)
	return n
}
