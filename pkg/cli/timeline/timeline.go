// Package timeline reconstructs what happened to a node, from what remains
// in the API: its events (nodemend's, the kubelet's, Karpenter's), its
// conditions, the repair annotations, its NodeClaim or Machine and its
// replacement. It orders them and measures every phase of a repair:
//
//	detect → toleration → (blocked) → drain → terminate → replacement Ready
//
// It is pure; the node may already be gone (Node nil), in which case the
// events that remain (kept an hour by default) tell the story: the
// controller's carry a typed record of each step (pkg/repair/history,
// docs/repair-history.md). Events without one (written by earlier versions)
// are listed as they are and give only their reason and time.
package timeline

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/eventlog"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// Owner is the node's NodeClaim or Machine, as far as the timeline needs it.
type Owner struct {
	Kind    string
	Name    string
	Created time.Time
	Deleted time.Time
	// Conditions are its status conditions' last transitions.
	Conditions []Transition
}

// Transition is one condition's last transition.
type Transition struct {
	Type, Status, Reason, Message string
	Time                          time.Time
}

// Input is everything known about the node.
type Input struct {
	Name string
	// Node is nil when the node no longer exists.
	Node *corev1.Node
	// Events regard the node and its owner, any order.
	Events []eventlog.Event
	// Owner is nil when unknown or gone.
	Owner *Owner
	// Replacement is the node that took its place, if known.
	Replacement *corev1.Node
	Now         time.Time
}

// Phase names, in repair order.
const (
	PhaseDetect      = "detect"
	PhaseToleration  = "toleration"
	PhaseBlocked     = "blocked"
	PhaseDrain       = "drain"
	PhaseTerminate   = "terminate"
	PhaseReplacement = "replacement"
	// The ladder's rungs (docs/repair.md, The ladder).
	PhaseRemediate  = "remediate"
	PhaseQuarantine = "quarantine"
)

// Phase is one step, with its duration.
type Phase struct {
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
	// End is Now for a phase still going on.
	End      time.Time     `json:"end"`
	Duration time.Duration `json:"durationNanos"`
	Seconds  float64       `json:"durationSeconds"`
	Ongoing  bool          `json:"ongoing,omitempty"`
	Note     string        `json:"note,omitempty"`
}

// Entry is one thing that happened.
type Entry struct {
	Time time.Time `json:"time"`
	// Source is who reported it: an event's component, or "node",
	// "annotation", "NodeClaim", ... for what is read from objects.
	Source  string `json:"source"`
	Type    string `json:"type,omitempty"`
	What    string `json:"what"`
	Message string `json:"message,omitempty"`
	Count   int32  `json:"count,omitempty"`
}

// Timeline is the result.
type Timeline struct {
	Node        string    `json:"node"`
	Gone        bool      `json:"gone"`
	Trigger     string    `json:"trigger,omitempty"`
	Owner       string    `json:"owner,omitempty"`
	Replacement string    `json:"replacement,omitempty"`
	Now         time.Time `json:"now"`
	Phases      []Phase   `json:"phases"`
	Entries     []Entry   `json:"entries"`
	// Total is from the first detection to the end of the last phase.
	Total time.Duration `json:"totalNanos"`
}

// repairFacts are the key times, from annotations or, for a gone node,
// from the controller's events.
type repairFacts struct {
	trigger    *v1alpha1.RepairTrigger
	since      time.Time
	toleration time.Duration
	started    time.Time
	drained    time.Time
	gone       time.Time
	recovered  time.Time
	target     string
	// The ladder: the first order, the return to service, the quarantine
	// and its release; rungs lists the attempts ordered ("Reboot 1/1").
	ordered, returned, quarantined, released time.Time
	rungs                                    []string
}

// Build assembles the timeline.
func Build(in Input) Timeline {
	tl := Timeline{Node: in.Name, Gone: in.Node == nil, Now: in.Now}
	evs := slices.Clone(in.Events)
	eventlog.Sort(evs)
	f := facts(in, evs)
	tl.Owner = f.target
	if f.trigger != nil {
		tl.Trigger = f.trigger.String()
	}
	if in.Owner != nil {
		tl.Owner = in.Owner.Kind + " " + in.Owner.Name
	}
	if in.Replacement != nil {
		tl.Replacement = in.Replacement.Name
	}
	tl.Phases = phases(in, evs, f)
	tl.Entries = entries(in, evs)
	if len(tl.Phases) > 0 {
		first, last := tl.Phases[0].Start, tl.Phases[0].End
		for _, p := range tl.Phases {
			if p.End.After(last) {
				last = p.End
			}
		}
		tl.Total = last.Sub(first)
	}
	return tl
}

func facts(in Input, evs []eventlog.Event) repairFacts {
	var f repairFacts
	if n := in.Node; n != nil {
		if st, err := record.Read(n); err == nil {
			f.trigger, f.since, f.started, f.drained = st.Trigger, st.Since.Earliest(), st.Started.Time, st.Drained.Time
			if st.Target != nil {
				f.target = st.Target.String()
			}
		}
		if f.since.IsZero() {
			f.since, f.trigger = unhealthySince(n, f.trigger)
		}
	}
	for _, e := range evs {
		if e.Source != eventlog.Controller && !strings.HasPrefix(e.Source, eventlog.Controller) {
			continue
		}
		rec := e.Repair
		if rec == nil {
			rec = &history.Record{} // an earlier version's event: its reason and time only
		}
		switch e.Reason {
		case history.Started, history.WouldStart:
			if f.trigger == nil && rec.Trigger != nil {
				f.trigger = rec.Trigger
			}
			if t := rec.UnhealthySince; !t.IsZero() && (f.since.IsZero() || t.Before(f.since)) {
				f.since = t
			}
			if rec.Toleration.Duration > 0 {
				f.toleration = rec.Toleration.Duration
			}
			if e.Reason == history.Started && f.started.IsZero() {
				f.started = e.First
			}
		case history.HandedOver:
			if f.drained.IsZero() {
				f.drained = e.First
			}
			if rec.Target != nil && f.target == "" {
				f.target = rec.Target.String()
			}
		case history.Succeeded:
			f.gone = e.First
		case history.RemediationOrdered:
			if f.ordered.IsZero() {
				f.ordered = e.First
			}
			if r := rec.Rung; r != nil {
				f.rungs = append(f.rungs, fmt.Sprintf("%s %d/%d", r.Action, r.Attempt, max(r.Of, 1)))
			}
		case history.ReturnedToService:
			f.returned = e.Last
		case history.Quarantined:
			if f.quarantined.IsZero() {
				f.quarantined = e.First
			}
		case history.QuarantineReleased:
			f.released = e.Last
		case history.Recovered:
			if !e.Last.Before(f.since) {
				f.recovered = e.Last
			}
		}
	}
	if in.Node == nil && f.gone.IsZero() && in.Owner != nil && !in.Owner.Deleted.IsZero() {
		f.gone = in.Owner.Deleted
	}
	return f
}

// unhealthySince is the earliest transition of an unhealthy condition, for
// a node the controller has not yet recorded.
func unhealthySince(n *corev1.Node, trigger *v1alpha1.RepairTrigger) (time.Time, *v1alpha1.RepairTrigger) {
	var since time.Time
	for _, c := range n.Status.Conditions {
		bad := (c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue) ||
			(health.IsOwned(string(c.Type)) && c.Status == corev1.ConditionFalse)
		if !bad || c.LastTransitionTime.IsZero() {
			continue
		}
		if since.IsZero() || c.LastTransitionTime.Time.Before(since) {
			since = c.LastTransitionTime.Time
			if trigger == nil || trigger.Type != c.Type {
				t := v1alpha1.TriggerOf(c)
				trigger = &t
			}
		}
	}
	return since, trigger
}

func phases(in Input, evs []eventlog.Event, f repairFacts) []Phase {
	var out []Phase
	add := func(name string, start, end time.Time, note string) {
		if start.IsZero() {
			return
		}
		p := Phase{Name: name, Start: start, End: end, Note: note}
		if end.IsZero() {
			p.End, p.Ongoing = in.Now, true
		}
		if p.End.Before(p.Start) {
			p.End = p.Start
		}
		p.Duration = p.End.Sub(p.Start)
		p.Seconds = p.Duration.Seconds()
		out = append(out, p)
	}
	if f.since.IsZero() {
		// No fault on record: only a replacement (or nothing) to show.
		addReplacement(in, add)
		return out
	}
	detectAt, detectNote := detection(evs, f)
	add(PhaseDetect, detectAt, f.since, detectNote)

	// End of waiting: repair start, recovery, or still waiting.
	waitEnd := f.started
	if waitEnd.IsZero() && !f.recovered.IsZero() {
		waitEnd = f.recovered
	}
	if waitEnd.IsZero() && in.Node == nil {
		waitEnd = lastSeen(evs)
	}
	blockedEv, blocked := eventlog.First(evs, "", history.Blocked)
	tolEnd := waitEnd
	note := ""
	if f.toleration > 0 {
		expiry := f.since.Add(f.toleration)
		if tolEnd.IsZero() || expiry.Before(tolEnd) {
			if !expiry.After(in.Now) || !tolEnd.IsZero() {
				tolEnd = expiry
			}
		}
		note = "toleration " + f.toleration.String()
	} else if blocked && (waitEnd.IsZero() || blockedEv.First.Before(waitEnd)) {
		tolEnd = blockedEv.First
	}
	if !f.recovered.IsZero() && f.started.IsZero() {
		note = strings.TrimPrefix(note+"; recovered before the toleration passed", "; ")
	}
	add(PhaseToleration, f.since, tolEnd, note)
	if blocked && !tolEnd.IsZero() && (waitEnd.IsZero() || tolEnd.Before(waitEnd)) {
		add(PhaseBlocked, tolEnd, waitEnd, blockedEv.Message)
	}
	if !f.started.IsZero() {
		drainNote := ""
		if e, ok := eventlog.Latest(evs, "", history.DrainBlocked); ok {
			drainNote = e.Message
		}
		end := f.drained
		for _, t := range []time.Time{f.ordered, f.quarantined} {
			if end.IsZero() || (!t.IsZero() && t.Before(end)) {
				end = t
			}
		}
		if end.IsZero() && in.Node == nil {
			end = lastSeen(evs)
		}
		add(PhaseDrain, f.started, end, drainNote)
	}
	if !f.ordered.IsZero() {
		end := f.returned
		for _, t := range []time.Time{f.quarantined, f.drained} {
			if end.IsZero() || (!t.IsZero() && t.Before(end)) {
				end = t
			}
		}
		add(PhaseRemediate, f.ordered, end, strings.Join(f.rungs, ", "))
	}
	if !f.quarantined.IsZero() {
		add(PhaseQuarantine, f.quarantined, f.released, "until released (kubectl mend release)")
	}
	if !f.drained.IsZero() {
		end := f.gone
		if end.IsZero() && in.Node == nil {
			end = lastSeen(evs)
		}
		add(PhaseTerminate, f.drained, end, f.target)
	}
	addReplacement(in, add)
	return out
}

func addReplacement(in Input, add func(string, time.Time, time.Time, string)) {
	r := in.Replacement
	if r == nil {
		return
	}
	ready := readySince(r)
	add(PhaseReplacement, r.CreationTimestamp.Time, ready, "node "+r.Name)
}

// readySince is when n became Ready, zero while it is not.
func readySince(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// detection is the agent's first event for the fault: its reason, else
// any Fatal reason of the registry, reported no later than a minute after
// the condition changed.
func detection(evs []eventlog.Event, f repairFacts) (time.Time, string) {
	want := ""
	if f.trigger != nil {
		want = f.trigger.Reason
	}
	var best *eventlog.Event
	for i := range evs {
		e := &evs[i]
		if e.Source != eventlog.Agent || e.First.After(f.since.Add(time.Minute)) {
			continue
		}
		r, known := health.LookupReason(e.Reason)
		if e.Reason != want && (!known || r.Severity != health.Fatal) {
			continue
		}
		if best == nil || e.First.Before(best.First) {
			best = e
		}
	}
	if best == nil {
		return f.since, "no detection event left; the condition's transition is the first trace"
	}
	at := best.First
	if at.After(f.since) {
		at = f.since // written together; the event can land a moment later
	}
	return at, best.Reason + ": " + best.Message
}

func lastSeen(evs []eventlog.Event) time.Time {
	var t time.Time
	for _, e := range evs {
		if e.Last.After(t) {
			t = e.Last
		}
	}
	return t
}

func entries(in Input, evs []eventlog.Event) []Entry {
	var out []Entry
	for _, e := range evs {
		en := Entry{Time: e.First, Source: e.Source, Type: e.Type, What: e.Reason, Message: e.Message, Count: e.Count}
		if e.Kind != "" && e.Kind != "Node" {
			en.What = e.Kind + " " + e.Reason
		}
		out = append(out, en)
	}
	if n := in.Node; n != nil {
		out = append(out, Entry{Time: n.CreationTimestamp.Time, Source: "node", What: "Created"})
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady && !health.IsOwned(string(c.Type)) {
				continue
			}
			what := string(c.Type) + "=" + string(c.Status)
			if c.Reason != "" {
				what += " (" + c.Reason + ")"
			}
			out = append(out, Entry{Time: c.LastTransitionTime.Time, Source: "condition", What: what, Message: c.Message})
		}
		if st, err := record.Read(n); err == nil {
			for _, t := range st.Since.Types() {
				out = append(out, Entry{Time: st.Since[t], Source: "record", What: "unhealthy since (" + string(t) + ")", Message: record.StateAnnotation})
			}
			if !st.Started.IsZero() {
				msg := ""
				if st.Trigger != nil {
					msg = st.Trigger.String()
				}
				if st.RepairNow != nil {
					msg += "; requested now: " + st.RepairNow.Request
				}
				out = append(out, Entry{Time: st.Started.Time, Source: "record", What: "repair started: tainted " + record.TaintKey, Message: msg})
			}
			if !st.Drained.IsZero() {
				out = append(out, Entry{Time: st.Drained.Time, Source: "record", What: "drained; handed over", Message: targetString(st)})
			}
			if !st.Failed.IsZero() {
				out = append(out, Entry{Time: st.Failed.Time, Source: "record", What: "repair failed", Message: record.StateAnnotation})
			}
			if !st.Quarantined.IsZero() {
				out = append(out, Entry{Time: st.Quarantined.Time, Source: "record", What: "quarantined", Message: "kubectl mend release " + n.Name})
			}
		}
		if n.DeletionTimestamp != nil {
			out = append(out, Entry{Time: n.DeletionTimestamp.Time, Source: "node", What: "Deletion requested"})
		}
	}
	if o := in.Owner; o != nil {
		out = append(out, Entry{Time: o.Created, Source: o.Kind, What: o.Kind + " " + o.Name + " created"})
		for _, c := range o.Conditions {
			out = append(out, Entry{Time: c.Time, Source: o.Kind, What: fmt.Sprintf("%s=%s", c.Type, c.Status), Message: strings.TrimSpace(c.Reason + " " + c.Message)})
		}
		if !o.Deleted.IsZero() {
			out = append(out, Entry{Time: o.Deleted, Source: o.Kind, What: o.Kind + " deletion requested"})
		}
	}
	if r := in.Replacement; r != nil {
		out = append(out, Entry{Time: r.CreationTimestamp.Time, Source: "replacement", What: "node " + r.Name + " created"})
		if t := readySince(r); !t.IsZero() {
			out = append(out, Entry{Time: t, Source: "replacement", What: "node " + r.Name + " Ready"})
		}
	}
	out = slices.DeleteFunc(out, func(e Entry) bool { return e.Time.IsZero() })
	slices.SortStableFunc(out, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	return out
}

func targetString(st record.State) string {
	if st.Target == nil {
		return ""
	}
	return st.Target.String()
}
