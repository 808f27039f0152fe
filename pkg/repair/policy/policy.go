// Package policy turns NodeRepairPolicy objects and the built-in defaults
// (docs/repair.md, Policies) into the effective repair policy of each node. It is pure: no
// I/O, no clock.
package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/rungs"
)

// Defaults that apply where no NodeRepairPolicy says otherwise.
const (
	DefaultToleration          = 30 * time.Minute
	DefaultAcceleratorTolerate = 10 * time.Minute
	DefaultDrainDeadline       = 10 * time.Minute
	DefaultMaxUnhealthy        = "20%"
)

// DefaultName is the Name of the built-in policy, used in logs and events.
const DefaultName = "default"

// Rule is one trigger: the condition Type with Status (and one of Reasons,
// when any are given) makes the node unhealthy; after Toleration it is
// repaired.
type Rule struct {
	Type       corev1.NodeConditionType
	Status     corev1.ConditionStatus
	Toleration time.Duration
	Reasons    []string
}

// Matches reports whether c triggers r.
func (r Rule) Matches(c corev1.NodeCondition) bool {
	if c.Type != r.Type || c.Status != r.Status {
		return false
	}
	return len(r.Reasons) == 0 || slices.Contains(r.Reasons, c.Reason)
}

// Drain is how pods leave a node under repair.
type Drain struct {
	Mode     v1alpha1.DrainMode
	Deadline time.Duration
	// MaxConcurrent bounds the policy's drains running at once; 0: no
	// bound of its own (the controller's applies).
	MaxConcurrent int
}

// Policy is the effective repair policy of a node.
type Policy struct {
	// Name is the NodeRepairPolicy it comes from, or DefaultName.
	Name         string
	Rules        []Rule
	MaxUnhealthy intstr.IntOrString
	Drain        Drain
	Action       v1alpha1.RepairAction
	// Ladder is the policy's own ladder; nil means the default ladder,
	// which depends on the node and the fault (pkg/repair/ladder).
	Ladder []Rung
	// QuarantineHealthyFor is how long a quarantined node must be healthy
	// to be released by itself; 0: only a person releases it.
	QuarantineHealthyFor time.Duration
	// RepairControlPlane: the policy opts control-plane nodes in
	// (spec.controlPlane: Repair; pkg/repair/controlplane).
	RepairControlPlane bool
	// DrainOnScheduledEvent: the policy drains a node ahead of a cloud's
	// scheduled event (spec.scheduledEvents.action: Drain).
	DrainOnScheduledEvent bool
}

// Rung is one rung of a ladder, its defaults filled in.
type Rung struct {
	Action   v1alpha1.LadderAction
	Attempts int
	// Timeout bounds one attempt (ResetAccelerator, Reboot).
	Timeout time.Duration
	// Window: the fault back within it after the node returned to service
	// continues the ladder.
	Window time.Duration
}

// Ladder defaults. An attempt's default timeout is its rung's, in the
// rung table (pkg/rungs).
const (
	DefaultRungWindow           = time.Hour
	DefaultQuarantineHealthyFor = 24 * time.Hour
)

// NewRung is action's rung with the defaults.
func NewRung(action v1alpha1.LadderAction) Rung {
	d, _ := rungs.Lookup(action)
	return Rung{Action: action, Attempts: 1, Window: DefaultRungWindow, Timeout: d.Timeout}
}

// Terminal reports whether the rung ends a ladder: after Replace the node is
// gone, after Quarantine a person decides (pkg/rungs says which do).
func (r Rung) Terminal() bool {
	d, ok := rungs.Lookup(r.Action)
	return ok && d.Terminal()
}

// DefaultRules is the default table of docs/repair.md (Policies).
func DefaultRules() []Rule {
	r := []Rule{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Toleration: DefaultToleration},
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Toleration: DefaultToleration},
	}
	for _, t := range []health.ConditionType{health.KernelReady, health.ContainerRuntimeReady, health.NetworkingReady, health.StorageReady} {
		r = append(r, Rule{Type: corev1.NodeConditionType(t), Status: corev1.ConditionFalse, Toleration: DefaultToleration})
	}
	return append(r, Rule{Type: corev1.NodeConditionType(health.AcceleratedHardwareReady), Status: corev1.ConditionFalse, Toleration: DefaultAcceleratorTolerate})
}

// Default is the policy of a node that no NodeRepairPolicy selects.
func Default() Policy {
	return Policy{
		Name:         DefaultName,
		Rules:        DefaultRules(),
		MaxUnhealthy: intstr.FromString(DefaultMaxUnhealthy),
		Drain:        Drain{Mode: v1alpha1.DrainEvict, Deadline: DefaultDrainDeadline},
		Action:       v1alpha1.ActionReplace,
		// Ladder nil: the default ladder applies (Replace where an engine
		// owns the node, as before the ladder existed).
		QuarantineHealthyFor: DefaultQuarantineHealthyFor,
	}
}

// IsPressure reports whether t is one of the kubelet's pressure conditions,
// which are never repair triggers: the kubelet relieves them by evicting pods.
// The CRD refuses them; this guards objects admitted before that rule existed
// and defaults compiled into other tools.
func IsPressure(t corev1.NodeConditionType) bool {
	switch t {
	case corev1.NodeDiskPressure, corev1.NodeMemoryPressure, corev1.NodePIDPressure:
		return true
	}
	return false
}

// FromAPI builds the effective policy of a NodeRepairPolicy: fields left empty
// take the defaults. Rules on pressure conditions are dropped and reported in
// the returned warnings; an invalid object is an error (the caller ignores
// that policy, so its nodes fall back to the next one or the defaults).
//
// A rule whose toleration is not shorter than the quiet period of a
// log-derived reason it acts on is an error (it could never repair that
// fault), judged by the registry's quiet periods; FromAPIWith judges by
// what is known of the agents' own.
func FromAPI(o *v1alpha1.NodeRepairPolicy) (Policy, []string, error) {
	return FromAPIWith(o, RegistryQuietPeriods("the registry"))
}

// FromAPIWith is FromAPI with what is known of the agents' quiet periods.
func FromAPIWith(o *v1alpha1.NodeRepairPolicy, agents AgentQuietPeriods) (Policy, []string, error) {
	p := Default()
	p.Name = o.Name
	var warnings []string
	if len(o.Spec.Rules) > 0 {
		p.Rules = nil
		for _, r := range o.Spec.Rules {
			t := corev1.NodeConditionType(r.ConditionType)
			if IsPressure(t) {
				warnings = append(warnings, fmt.Sprintf("rule on %s ignored: pressure conditions are never repair triggers", t))
				continue
			}
			switch r.Status {
			case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			default:
				return Policy{}, nil, fmt.Errorf("rule on %s: status %q is not True, False or Unknown", t, r.Status)
			}
			if r.Toleration.Duration < 0 {
				return Policy{}, nil, fmt.Errorf("rule on %s: negative toleration %s", t, r.Toleration.Duration)
			}
			reasons, unknown := expandReasons(t, r.Reasons)
			for _, u := range unknown {
				warnings = append(warnings, fmt.Sprintf("rule on %s: %q is neither a nodemend reason nor a family (docs/reasons.md); no condition will have it", t, u))
			}
			rule := Rule{Type: t, Status: r.Status, Toleration: r.Toleration.Duration, Reasons: reasons}
			w, err := checkQuietPeriods(rule, agents)
			if err != nil {
				return Policy{}, nil, err
			}
			if w != "" {
				warnings = append(warnings, w)
			}
			p.Rules = append(p.Rules, rule)
		}
	}
	if o.Spec.MaxUnhealthy != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(o.Spec.MaxUnhealthy, 100, true); err != nil {
			return Policy{}, nil, fmt.Errorf("maxUnhealthy: %w", err)
		}
		p.MaxUnhealthy = *o.Spec.MaxUnhealthy
	}
	if d := o.Spec.Drain; d != nil {
		switch d.Mode {
		case "":
		case v1alpha1.DrainEvict, v1alpha1.DrainDelete, v1alpha1.DrainSkip:
			p.Drain.Mode = d.Mode
		default:
			return Policy{}, nil, fmt.Errorf("drain.mode %q is not Evict, Delete or Skip", d.Mode)
		}
		if d.Deadline != nil {
			if d.Deadline.Duration < 0 {
				return Policy{}, nil, fmt.Errorf("negative drain.deadline %s", d.Deadline.Duration)
			}
			p.Drain.Deadline = d.Deadline.Duration
		}
		if d.MaxConcurrent != nil {
			if *d.MaxConcurrent < 1 {
				return Policy{}, nil, fmt.Errorf("drain.maxConcurrent %d is less than 1", *d.MaxConcurrent)
			}
			p.Drain.MaxConcurrent = int(*d.MaxConcurrent)
		}
	}
	switch o.Spec.Action {
	case "":
	case v1alpha1.ActionReplace:
		// What it has always meant: hand the node to its engine.
		p.Action = o.Spec.Action
		p.Ladder = []Rung{NewRung(v1alpha1.LadderReplace)}
	case v1alpha1.ActionNone:
		p.Action = o.Spec.Action
	default:
		return Policy{}, nil, fmt.Errorf("action %q is not Replace or None", o.Spec.Action)
	}
	if len(o.Spec.Ladder) > 0 {
		if o.Spec.Action != "" {
			return Policy{}, nil, fmt.Errorf("action %s and a ladder are exclusive", o.Spec.Action)
		}
		l, err := ladderFromAPI(o.Spec.Ladder)
		if err != nil {
			return Policy{}, nil, err
		}
		p.Ladder = l
	}
	if q := o.Spec.Quarantine; q != nil && q.HealthyFor != nil {
		if q.HealthyFor.Duration < 0 {
			return Policy{}, nil, fmt.Errorf("negative quarantine.healthyFor %s", q.HealthyFor.Duration)
		}
		p.QuarantineHealthyFor = q.HealthyFor.Duration
	}
	switch o.Spec.ControlPlane {
	case "", v1alpha1.ControlPlaneSkip:
	case v1alpha1.ControlPlaneRepair:
		p.RepairControlPlane = true
	default:
		return Policy{}, nil, fmt.Errorf("controlPlane %q is not Skip or Repair", o.Spec.ControlPlane)
	}
	if se := o.Spec.ScheduledEvents; se != nil {
		switch se.Action {
		case "", v1alpha1.ScheduledEventIgnore:
		case v1alpha1.ScheduledEventDrain:
			p.DrainOnScheduledEvent = true
		default:
			return Policy{}, nil, fmt.Errorf("scheduledEvents.action %q is not Ignore or Drain", se.Action)
		}
	}
	return p, warnings, nil
}

// ladderFromAPI checks a ladder as the CRD does (for objects admitted
// before a rule existed) and fills in each rung's defaults.
func ladderFromAPI(in []v1alpha1.LadderRung) ([]Rung, error) {
	var out []Rung
	seen := map[v1alpha1.LadderAction]bool{}
	for i, r := range in {
		if _, ok := rungs.Lookup(r.Action); !ok {
			return nil, fmt.Errorf("ladder[%d]: action %q is not %s", i, r.Action, oneOf(rungs.Names()))
		}
		if seen[r.Action] {
			return nil, fmt.Errorf("ladder[%d]: %s appears twice", i, r.Action)
		}
		seen[r.Action] = true
		rung := NewRung(r.Action)
		if r.Attempts < 0 || r.Attempts > 5 {
			return nil, fmt.Errorf("ladder[%d]: attempts %d not between 1 and 5", i, r.Attempts)
		}
		if r.Attempts > 0 && !rung.Terminal() {
			rung.Attempts = int(r.Attempts)
		}
		if r.Timeout != nil && !rung.Terminal() {
			if r.Timeout.Duration < time.Minute || r.Timeout.Duration > 2*time.Hour {
				return nil, fmt.Errorf("ladder[%d]: timeout %s not between 1m and 2h", i, r.Timeout.Duration)
			}
			rung.Timeout = r.Timeout.Duration
		}
		if r.Window != nil {
			if r.Window.Duration < 0 {
				return nil, fmt.Errorf("ladder[%d]: negative window %s", i, r.Window.Duration)
			}
			rung.Window = r.Window.Duration
		}
		if rung.Terminal() && i != len(in)-1 {
			return nil, fmt.Errorf("ladder[%d]: %s may only be the last rung", i, r.Action)
		}
		out = append(out, rung)
	}
	return out, nil
}

// oneOf is "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// expandReasons replaces the family names among a rule's reasons by their
// members (NvidiaXIDError: every NvidiaXID<N>Error), as the EKS Node
// Monitoring Agent's policies name them. On a condition type nodemend owns,
// names that are neither a reason nor a family nor an operator's reason
// (health.CustomReasonPrefix: the agents' configs define them) are
// returned as unknown (they are kept: a newer agent may report them); other
// condition types (the kubelet's Ready) have reasons nodemend does not
// know, and are kept as given.
func expandReasons(t corev1.NodeConditionType, names []string) (reasons, unknown []string) {
	for _, n := range names {
		members, ok := health.Expand(n)
		if !ok {
			members = []string{n}
			if health.IsOwned(string(t)) && !health.IsCustomReason(n) {
				unknown = append(unknown, n)
			}
		}
		for _, m := range members {
			if !slices.Contains(reasons, m) {
				reasons = append(reasons, m)
			}
		}
	}
	return reasons, unknown
}

// Problem is a NodeRepairPolicy that was ignored or partly ignored.
type Problem struct {
	Policy string
	// Err is set when the whole policy is ignored.
	Err error
	// Warnings are parts that were ignored.
	Warnings []string
}

// Set is the compiled set of NodeRepairPolicies.
type Set struct {
	entries []entry
	// def is Default(), built once: For runs for every node of the fleet.
	def Policy
}

type entry struct {
	weight   int32
	selector labels.Selector
	policy   Policy
}

// NewSet compiles policies, ordered by weight (highest first) then name.
// Policies that cannot be used are left out and reported.
func NewSet(objs []v1alpha1.NodeRepairPolicy) (*Set, []Problem) {
	return NewSetWith(objs, RegistryQuietPeriods("the registry"))
}

// NewSetWith is NewSet with what is known of the agents' quiet periods
// (FromAPIWith).
func NewSetWith(objs []v1alpha1.NodeRepairPolicy, agents AgentQuietPeriods) (*Set, []Problem) {
	s := &Set{def: Default()}
	var problems []Problem
	for i := range objs {
		o := &objs[i]
		p, warnings, err := FromAPIWith(o, agents)
		var sel labels.Selector
		if err == nil {
			sel, err = selector(o.Spec.NodeSelector)
		}
		if err != nil || len(warnings) > 0 {
			problems = append(problems, Problem{Policy: o.Name, Err: err, Warnings: warnings})
		}
		if err != nil {
			continue
		}
		s.entries = append(s.entries, entry{weight: o.Spec.Weight, selector: sel, policy: p})
	}
	slices.SortFunc(s.entries, func(a, b entry) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.policy.Name, b.policy.Name)
	})
	return s, problems
}

func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("nodeSelector: %w", err)
	}
	return sel, nil
}

// For returns the policy of a node with the given labels. A nil Set has no
// policies: the defaults apply. The returned policy shares its slices with
// the Set: read it, do not modify it.
func (s *Set) For(nodeLabels map[string]string) Policy {
	if s == nil {
		return Default()
	}
	set := labels.Set(nodeLabels)
	for i := range s.entries {
		if s.entries[i].selector.Matches(set) {
			return s.entries[i].policy
		}
	}
	return s.def
}

// Len is the number of usable policies.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}
