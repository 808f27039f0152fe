// Package workflow is the repair of one node, as steps whose every result is
// recorded on the Node object, so that a restarted controller or a new leader
// resumes exactly where the last one stopped:
//
//	(healthy) ──unhealthy──► unhealthy-since recorded
//	          ──toleration passed, gate open──► Draining   (taint + phase + start time, one patch)
//	          ──pods gone or deadline──►        Terminating (phase + the backend's target, one patch)
//	          ──target deleted──►               (node gone: done)
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
	case PhaseNone, PhaseDraining, PhaseTerminating:
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
func Started(node *corev1.Node, since unhealthy.Since, trigger corev1.NodeCondition, policyName string, now time.Time) *corev1.Node {
	n := node.DeepCopy()
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
