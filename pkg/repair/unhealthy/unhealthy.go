// Package unhealthy decides, from a node's conditions and its policy's rules,
// whether the node is unhealthy, since when, and when its toleration
// expires. It is pure: the caller passes the time and what was recorded on
// the node before.
//
// The clock of a fault starts at the condition's LastTransitionTime, or at the
// time the controller first saw the node unhealthy if that is earlier. The
// latter is recorded on the Node (Since, in an annotation), so that an agent
// that keeps moving LastTransitionTime while the condition stays unhealthy
// cannot postpone the repair forever, and a new controller (restart, new
// leader) continues the same clock.
package unhealthy

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/policy"
)

// Since is, per condition type, the start of the unhealthy period. Keyed by
// type, not by type and status: Ready going from False to Unknown is the same
// fault and keeps its clock.
type Since map[corev1.NodeConditionType]time.Time

// ParseSince reads the annotation form written by Since.String. An empty
// string is an empty record.
func ParseSince(s string) (Since, error) {
	if s == "" {
		return Since{}, nil
	}
	var raw map[string]time.Time
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("parsing unhealthy-since record %q: %w", s, err)
	}
	out := make(Since, len(raw))
	for k, v := range raw {
		out[corev1.NodeConditionType(k)] = v
	}
	return out, nil
}

// String is the annotation form: a JSON object of RFC 3339 times, keys
// sorted, whole seconds (the precision of LastTransitionTime).
func (s Since) String() string {
	if len(s) == 0 {
		return ""
	}
	raw := make(map[string]string, len(s))
	for k, v := range s {
		raw[string(k)] = v.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	b, _ := json.Marshal(raw) // map[string]string always marshals; keys come out sorted
	return string(b)
}

// Equal reports whether two records hold the same times, to the second.
func (s Since) Equal(o Since) bool {
	return s.String() == o.String()
}

// Earliest is the start of the oldest fault, zero when there is none.
func (s Since) Earliest() time.Time {
	var t time.Time
	for _, v := range s {
		if t.IsZero() || v.Before(t) {
			t = v
		}
	}
	return t
}

// Finding is one rule that the node's conditions trigger.
type Finding struct {
	Rule      policy.Rule
	Condition corev1.NodeCondition
	// Since is when the fault started (see the package comment).
	Since time.Time
	// Expires is Since plus the rule's toleration: the node is repairable
	// from then on.
	Expires time.Time
}

// Assessment is the health of one node under its policy at one time.
type Assessment struct {
	// Findings are every rule the node triggers, earliest expiry first.
	Findings []Finding
	// Since is the record to keep on the node: a start time for every
	// unhealthy condition type, and nothing else.
	Since Since
}

// Unhealthy reports whether any rule is triggered, however recently.
func (a Assessment) Unhealthy() bool { return len(a.Findings) > 0 }

// Expired returns the finding whose toleration expired first, if any has
// expired at now. A toleration expires at Expires exactly.
func (a Assessment) Expired(now time.Time) (Finding, bool) {
	if len(a.Findings) > 0 && !now.Before(a.Findings[0].Expires) {
		return a.Findings[0], true
	}
	return Finding{}, false
}

// NextExpiry is the earliest expiry, zero when the node is healthy.
func (a Assessment) NextExpiry() time.Time {
	if len(a.Findings) == 0 {
		return time.Time{}
	}
	return a.Findings[0].Expires
}

// Assess evaluates conditions against rules at now, given the record kept on
// the node so far. Rules on the kubelet's pressure conditions are ignored,
// whatever the policy says. A condition whose LastTransitionTime is missing
// or in the future (clock skew) counts from now.
func Assess(conditions []corev1.NodeCondition, rules []policy.Rule, recorded Since, now time.Time) Assessment {
	a := Assessment{Since: Since{}}
	for _, c := range conditions {
		for _, r := range rules {
			if policy.IsPressure(r.Type) || !r.Matches(c) {
				continue
			}
			since, ok := a.Since[c.Type]
			if !ok {
				since = now
				if ltt := c.LastTransitionTime.Time; !ltt.IsZero() && ltt.Before(since) {
					since = ltt
				}
				if rec, ok := recorded[c.Type]; ok && rec.Before(since) {
					since = rec
				}
				a.Since[c.Type] = since
			}
			a.Findings = append(a.Findings, Finding{Rule: r, Condition: c, Since: since, Expires: since.Add(r.Toleration)})
		}
	}
	slices.SortStableFunc(a.Findings, func(x, y Finding) int { return x.Expires.Compare(y.Expires) })
	return a
}

// Types lists the condition types of a record, sorted.
func (s Since) Types() []corev1.NodeConditionType {
	return slices.Sorted(maps.Keys(s))
}

// Any reports whether any rule flags any condition, however recently: the
// test the safety gate counts nodes with. It allocates nothing, since the gate
// runs it over the whole fleet.
func Any(conditions []corev1.NodeCondition, rules []policy.Rule) bool {
	for i := range conditions {
		for j := range rules {
			if !policy.IsPressure(rules[j].Type) && rules[j].Matches(conditions[i]) {
				return true
			}
		}
	}
	return false
}
