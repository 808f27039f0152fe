// Package fleet computes what `kubectl mend status` shows: for every node its
// conditions and the repair state the nodemend controller would decide, and
// for every pool and zone the safety gate's count against its allowance.
//
// It is pure and reuses the controller's own decision functions (policy,
// unhealthy, pool, gate, record), so that status agrees with what the
// controller does: a node is "tolerating" exactly when unhealthy.Assess has
// not expired, "blocked" exactly when gate.Decide says so, and so on.
package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/controlplane"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// State is a node's repair state, as the controller sees it.
type State string

const (
	Healthy State = "healthy"
	// Tolerating: unhealthy, toleration not yet passed.
	Tolerating State = "tolerating"
	// Due: toleration passed and every gate open; the controller starts the
	// repair on its next reconcile (or, in dry-run, only says it would).
	Due State = "due"
	// Blocked: toleration passed, a gate is closed (pool, zone, veto, pause).
	Blocked State = "blocked"
	// NotRepaired: unhealthy, but its policy's action is None.
	NotRepaired State = "not-repaired"
	Draining    State = "draining"
	Terminating State = "terminating"
	// Remediating: a ladder rung (reboot, accelerator reset) was ordered
	// and is being verified.
	Remediating State = "remediating"
	// Quarantined: cordoned and tainted for a person (kubectl mend release).
	Quarantined State = "quarantined"
	// Failed: handed over, but the node outlived its termination timeout.
	Failed State = "failed"
	// Deleting: the node has a deletion timestamp; the controller waits.
	Deleting State = "deleting"
	// Invalid: the repair annotations cannot be read; the controller
	// leaves the node alone.
	Invalid State = "invalid"
)

// Input is everything the assessment depends on.
type Input struct {
	Nodes    []*corev1.Node
	Policies *policy.Set
	// Paused is the pause switch (the ConfigMap exists), with its reason.
	Paused      bool
	PauseReason string
	Pools       pool.Resolver
	// Machines finds Cluster API Machines; nil without Cluster API.
	Machines pool.MachineLookup
	Now      time.Time
}

// Node is one row of status.
type Node struct {
	Name string `json:"name"`
	Pool string `json:"pool"`
	Zone string `json:"zone,omitempty"`
	// Ready is the kubelet's Ready status ("" when not reported).
	Ready string `json:"ready"`
	// Conditions are nodemend's five, by type; absent types are left out.
	Conditions map[string]string `json:"conditions"`
	// Reason and Message are the first unhealthy condition's, nodemend's
	// Fatal reason where there is one.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	State   State  `json:"state"`
	// Detail says why, in words: time left, the gate's message, ...
	Detail string `json:"detail,omitempty"`
	// Gate names the closed gate when State is Blocked (or a repair in
	// progress is halted by a veto or the pause).
	Gate   gate.Gate `json:"gate,omitempty"`
	Policy string    `json:"policy"`
	// UnhealthySince is when the oldest fault started; RepairableAt when
	// the toleration ends (both zero when healthy).
	UnhealthySince time.Time `json:"unhealthySince,omitzero"`
	RepairableAt   time.Time `json:"repairableAt,omitzero"`
	// Started and Drained are the repair's recorded steps.
	Started time.Time `json:"repairStarted,omitzero"`
	Drained time.Time `json:"repairDrained,omitzero"`
	Target  string    `json:"repairTarget,omitempty"`
	// Rung is the ladder rung of the repair ("Reboot 1/2": the action and
	// its attempt), empty for repairs started before the ladder.
	Rung string `json:"rung,omitempty"`
	// InstanceType is for -o wide.
	InstanceType string `json:"instanceType,omitempty"`
	// Unhealthy is what the gate counts: flagged by a rule, or in repair.
	Unhealthy bool `json:"unhealthy"`
}

// Group is the gate's count for one pool or zone.
type Group struct {
	Name      string `json:"name"`
	Size      int    `json:"size"`
	Unhealthy int    `json:"unhealthy"`
	// Allowed is how many may be unhealthy under MaxUnhealthy; -1 when the
	// limit is invalid (the gate then blocks).
	Allowed      int    `json:"allowed"`
	MaxUnhealthy string `json:"maxUnhealthy"`
	// MixedPolicies: the nodes have different maxUnhealthy; the gate uses
	// the deciding node's, Allowed uses the most common one.
	MixedPolicies bool `json:"mixedPolicies,omitempty"`
	Blocked       bool `json:"blocked"`
}

// Report is the whole status.
type Report struct {
	Time        time.Time `json:"time"`
	Paused      bool      `json:"paused"`
	PauseReason string    `json:"pauseReason,omitempty"`
	Nodes       []Node    `json:"nodes"`
	Pools       []Group   `json:"pools"`
	Zones       []Group   `json:"zones,omitempty"`
}

// counted is a group being counted, with the limits seen in it.
type counted struct {
	g      gate.Group
	limits map[string]int
	limit  intstr.IntOrString
}

func (c *counted) add(unhealthyNode bool, limit intstr.IntOrString) {
	c.g.Add(unhealthyNode)
	if c.limits == nil {
		c.limits = map[string]int{}
	}
	k := limit.String()
	c.limits[k]++
	if c.limits[k] > c.limits[c.limit.String()] || len(c.limits) == 1 {
		c.limit = limit
	}
}

func (c *counted) group() Group {
	out := Group{Name: c.g.Name, Size: c.g.Size, Unhealthy: c.g.Unhealthy, MaxUnhealthy: c.limit.String(), MixedPolicies: len(c.limits) > 1}
	allowed, err := gate.MaxAllowed(c.limit, c.g.Size)
	if err != nil {
		out.Allowed, out.Blocked = -1, true
		return out
	}
	out.Allowed = allowed
	out.Blocked = c.g.Unhealthy > allowed
	return out
}

// perNode is what the first pass learns about a node.
type perNode struct {
	pool      pool.Pool
	poolKey   string
	policy    policy.Policy
	unhealthy bool
}

// Assess computes the report: one pass to count pools and zones, one to
// decide each node. Linear in the number of nodes.
func Assess(in Input) Report {
	r := Report{Time: in.Now, Paused: in.Paused, PauseReason: in.PauseReason, Nodes: make([]Node, 0, len(in.Nodes))}
	pools := map[pool.Pool]*counted{}
	zones := map[string]*counted{}
	info := make([]perNode, len(in.Nodes))
	for i, n := range in.Nodes {
		p := in.Pools.Of(n, in.Machines)
		pol := in.Policies.For(n.Labels)
		u := CountsUnhealthy(n, pol.Rules)
		info[i] = perNode{pool: p, policy: pol, unhealthy: u}
		c := pools[p]
		if c == nil {
			c = &counted{g: gate.Group{Name: p.String()}}
			pools[p] = c
		}
		info[i].poolKey = c.g.Name
		c.add(u, pol.MaxUnhealthy)
		if z := n.Labels[pool.ZoneLabel]; z != "" {
			zc := zones[z]
			if zc == nil {
				zc = &counted{g: gate.Group{Name: z}}
				zones[z] = zc
			}
			zc.add(u, pol.MaxUnhealthy)
		}
	}
	for i, n := range in.Nodes {
		row := assessNode(in, n, info[i], pools[info[i].pool].g, zones)
		r.Nodes = append(r.Nodes, row)
	}
	for _, c := range pools {
		r.Pools = append(r.Pools, c.group())
	}
	for _, c := range zones {
		r.Zones = append(r.Zones, c.group())
	}
	slices.SortFunc(r.Pools, func(a, b Group) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(r.Zones, func(a, b Group) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(r.Nodes, func(a, b Node) int {
		if c := cmp.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return r
}

// CountsUnhealthy is the gate's definition of an unhealthy node, the same
// as the controller's: any rule of its policy flags it, however recently,
// or a repair is in progress.
func CountsUnhealthy(n *corev1.Node, rules []policy.Rule) bool {
	if record.InRepair(n) {
		return true
	}
	return unhealthy.Any(n.Status.Conditions, rules)
}

func assessNode(in Input, n *corev1.Node, pn perNode, poolGroup gate.Group, zones map[string]*counted) Node {
	row := Node{
		Name: n.Name, Pool: pn.poolKey, Zone: n.Labels[pool.ZoneLabel], Policy: pn.policy.Name,
		InstanceType: n.Labels[corev1.LabelInstanceTypeStable], Unhealthy: pn.unhealthy,
		Conditions: make(map[string]string, len(health.ConditionTypes())),
	}
	fillConditions(&row, n)
	st, err := record.Read(n)
	if err != nil {
		row.State, row.Detail = Invalid, err.Error()+"; the controller leaves this node alone until its "+record.StateAnnotation+" annotation is fixed or removed"
		return row
	}
	row.Started, row.Drained = st.Started.Time, st.Drained.Time
	if st.Target != nil {
		row.Target = st.Target.String()
	}
	if n.DeletionTimestamp != nil {
		row.State, row.Detail = Deleting, "node is being deleted since "+ago(in.Now, n.DeletionTimestamp.Time)
		return row
	}
	if a := st.Rung; a != nil && st.Phase != record.PhaseNone {
		row.Rung = fmt.Sprintf("%s %d/%d", a.Action, a.Attempt, max(a.Of, 1))
	}
	switch st.Phase {
	case record.PhaseDraining, record.PhaseTerminating, record.PhaseRemediating, record.PhaseQuarantined:
		return inRepair(in, row, st, pn.policy)
	}
	asmt := unhealthy.Assess(n.Status.Conditions, pn.policy.Rules, st.Since, in.Now)
	if !asmt.Unhealthy() {
		row.State = Healthy
		return row
	}
	first := asmt.Findings[0]
	row.UnhealthySince, row.RepairableAt = asmt.Since.Earliest(), first.Expires
	if row.Reason == "" {
		row.Reason, row.Message = first.Condition.Reason, first.Condition.Message
	}
	if pn.policy.Action == v1alpha1.ActionNone {
		row.State, row.Detail = NotRepaired, "policy "+pn.policy.Name+" has action None: counted, never repaired"
		return row
	}
	if _, expired := asmt.Expired(in.Now); !expired {
		row.State = Tolerating
		row.Detail = Short(first.Expires.Sub(in.Now)) + " left of " + Short(first.Rule.Toleration) + " (" + v1alpha1.TriggerOf(first.Condition).String() + ")"
		return row
	}
	gi := gate.Input{Vetoed: st.Vetoed, Veto: st.Veto, Paused: in.Paused, PauseReason: in.PauseReason, MaxUnhealthy: pn.policy.MaxUnhealthy}
	if !gi.Vetoed && !gi.Paused {
		gi.Pool = poolGroup
		if z, ok := zones[row.Zone]; ok && row.Zone != "" {
			zg := z.g
			gi.Zone = &zg
		}
	}
	d := gate.Decide(gi)
	if role := controlplane.RoleOf(n, nil); d.Allowed && role.Any() && !pn.policy.RepairControlPlane {
		// The role label alone (the static pods are not read here; the
		// controller and kubectl mend explain read them).
		d = gate.Decision{Gate: gate.ControlPlane, Message: controlplane.Decide(controlplane.Input{Node: n.Name, Role: role, Policy: pn.policy.Name}).Message}
	}
	if !d.Allowed {
		row.State, row.Gate, row.Detail = Blocked, d.Gate, d.Message
		return row
	}
	row.State, row.Detail = Due, "toleration passed "+ago(in.Now, first.Expires)+"; "+d.Message
	return row
}

// inRepair describes a node in Draining or Terminating. Only the veto and
// the pause halt a repair in progress (the controller's halted()).
func inRepair(in Input, row Node, st record.State, pol policy.Policy) Node {
	row.UnhealthySince = st.Since.Earliest()
	trigger := v1alpha1.RepairTrigger{}
	if st.Trigger != nil {
		trigger = *st.Trigger
	}
	if row.Reason == "" {
		row.Reason = trigger.Reason
	}
	halt := gate.Decide(gate.Input{Vetoed: st.Vetoed, Veto: st.Veto, Paused: in.Paused, PauseReason: in.PauseReason})
	halted := ""
	if halt.Gate == gate.Veto || halt.Gate == gate.Pause {
		row.Gate = halt.Gate
		halted = "; halted: " + halt.Message
	}
	switch st.Phase {
	case record.PhaseRemediating:
		a := st.Rung
		row.State = Remediating
		row.Detail = fmt.Sprintf("%s ordered %s (NodeRemediation %s), fails at %s", a.Action, ago(in.Now, a.Started.Time), a.Order, a.Deadline().UTC().Format(time.RFC3339))
		if !a.Verified.IsZero() {
			row.Detail = fmt.Sprintf("rebooted %s; waiting for %s to be healthy, fails at %s", ago(in.Now, a.Verified.Time), trigger.Type, a.Deadline().UTC().Format(time.RFC3339))
		}
		row.Detail += halted
		return row
	case record.PhaseQuarantined:
		row.State = Quarantined
		row.Detail = "quarantined " + ago(in.Now, st.Quarantined.Time) + " after " + trigger.String() + "; kubectl mend release " + row.Name
		if st.Released {
			row.Detail = "release requested: " + st.Release
		} else if !st.HealthySince.IsZero() && pol.QuarantineHealthyFor > 0 {
			row.Detail += "; healthy " + ago(in.Now, st.HealthySince.Time) + ", released after " + Short(pol.QuarantineHealthyFor)
		}
		return row
	}
	if st.Phase == record.PhaseDraining {
		row.State = Draining
		deadline := st.Started.Add(pol.Drain.Deadline)
		row.Detail = "for " + Short(in.Now.Sub(st.Started.Time))
		if in.Now.Before(deadline) {
			row.Detail += ", deadline in " + Short(deadline.Sub(in.Now))
		} else {
			row.Detail += ", deadline passed: remaining pods are deleted"
		}
		row.Detail += halted
		return row
	}
	row.State = Terminating
	if !st.Failed.IsZero() {
		row.State = Failed
		row.Detail = "node still exists " + Short(in.Now.Sub(st.Drained.Time)) + " after " + row.Target + " was handed over; check its engine" + halted
		return row
	}
	row.Detail = "handed over " + ago(in.Now, st.Drained.Time) + ": " + row.Target + halted
	return row
}

// fillConditions copies Ready and nodemend's conditions, and picks the
// reason to show: a False nodemend condition's (the agent's Fatal
// reason), else a not-Ready kubelet's.
func fillConditions(row *Node, n *corev1.Node) {
	var readyReason, readyMessage string
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type == corev1.NodeReady {
			row.Ready = string(c.Status)
			if c.Status != corev1.ConditionTrue {
				readyReason, readyMessage = c.Reason, c.Message
				if readyReason == "" {
					readyReason = "NotReady"
				}
			}
			continue
		}
		if !health.IsOwned(string(c.Type)) {
			continue
		}
		row.Conditions[string(c.Type)] = string(c.Status)
		if c.Status == corev1.ConditionFalse && row.Reason == "" {
			row.Reason, row.Message = c.Reason, c.Message
		}
	}
	if row.Reason == "" {
		row.Reason, row.Message = readyReason, readyMessage
	}
}

// Short formats a duration for people: 45s, 12m, 3h4m, 2d5h.
func Short(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 || m >= 10 {
			return itoa(m) + "m"
		}
		return itoa(m) + "m" + itoa(s) + "s"
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return itoa(h) + "h"
		}
		return itoa(h) + "h" + itoa(m) + "m"
	}
	days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
	if h == 0 {
		return itoa(days) + "d"
	}
	return itoa(days) + "d" + itoa(h) + "h"
}

func ago(now, t time.Time) string {
	if t.After(now) {
		return "in " + Short(t.Sub(now))
	}
	return Short(now.Sub(t)) + " ago"
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for i > 0 {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
	}
	return string(b[p:])
}
