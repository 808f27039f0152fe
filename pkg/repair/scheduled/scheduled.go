// Package scheduled is the evidence and the record of a drain ahead of a
// cloud's scheduled event (a NodeRepairPolicy's scheduledEvents.action:
// Drain): which of a node agent's Events prove that the cloud has scheduled
// an event for the node now, and the annotation that records the drain on
// the Node, so that any leader lifts the cordon it set once the event is
// gone.
//
// The evidence is the agent's own report. nodemend-agent turns the events
// of the instance metadata service (AWS IMDS, GCE, Azure Scheduled Events)
// into Warning Events with the reason ScheduledMaintenance or
// SpotInterruption about its Node (docs/reasons.md). Only an Event written
// as the agent on that node counts: source and reporting controller
// nodemend-agent, source host and reporting instance the node itself. The
// chart's admission policies hold those fields to that identity (the
// agent's token bound to the node, or with systemd agents the node's own
// kubelet credentials): the controller cannot write them (it records
// events only as nodemend-repair), and nor can any other identity
// (docs/security.md#evidence).
package scheduled

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/health"
)

// Annotation records a drain ahead of a scheduled event on the Node.
const Annotation = "nodemend.dev/scheduled-drain"

// Agent is the component and reporting controller of the agent's Events.
const Agent = "nodemend-agent"

// Fresh is how long the agent's last report of a scheduled event proves
// it: the agent repeats a Warning that its check keeps finding every hour
// (its exporter's WarningRenotify) and says nothing when the event is gone,
// so a report older than that and a margin for a slow write is over. An
// agent restarted after the event (the node rebooted for it) reports a
// standing event again at its first check.
const Fresh = 70 * time.Minute

// Reasons are the agent's reasons for a cloud's scheduled event.
var Reasons = []string{health.ReasonScheduledMaintenance, health.ReasonSpotInterruption}

// IsReason reports whether reason is one of Reasons.
func IsReason(reason string) bool { return slices.Contains(Reasons, reason) }

// Report is a scheduled event as the node's agent last reported it.
type Report struct {
	Reason  string
	Message string
	// Seen is when the agent last reported it.
	Seen time.Time
	// Until is the end of the cloud's window, when the message names one.
	Until time.Time
}

// Over reports whether the report proves nothing at now any more: older
// than Fresh, or past the end of the cloud's window.
func (r Report) Over(now time.Time) bool {
	return !now.Before(r.Seen.Add(Fresh)) || (!r.Until.IsZero() && !now.Before(r.Until))
}

// Expires is when the report stops proving the event.
func (r Report) Expires() time.Time {
	t := r.Seen.Add(Fresh)
	if !r.Until.IsZero() && r.Until.Before(t) {
		return r.Until
	}
	return t
}

// FromAgent reports whether e is the report of a scheduled event written as
// the agent of node: a Warning about the Node with one of Reasons, whose
// source and reporting controller are the agent and whose source host and
// reporting instance are the node.
func FromAgent(node string, e *corev1.Event) bool {
	return e.Type == corev1.EventTypeWarning && IsReason(e.Reason) &&
		e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node && e.InvolvedObject.Namespace == "" &&
		e.Namespace == metav1.NamespaceDefault &&
		e.Source.Component == Agent && e.Source.Host == node &&
		e.ReportingController == Agent && e.ReportingInstance == node
}

// Evidence is the newest of the agent's reports of a scheduled event for
// node among evs that is not over at now.
func Evidence(node string, evs []corev1.Event, now time.Time) (Report, bool) {
	var best Report
	found := false
	for i := range evs {
		e := &evs[i]
		if !FromAgent(node, e) {
			continue
		}
		r := Report{Reason: e.Reason, Message: e.Message, Seen: seen(e, now), Until: until(e.Message)}
		if r.Over(now) {
			continue
		}
		if !found || r.Seen.After(best.Seen) {
			best, found = r, true
		}
	}
	return best, found
}

// seen is when e was last reported; a time ahead of now (clock skew) counts
// as now.
func seen(e *corev1.Event, now time.Time) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	if t.After(now) {
		return now
	}
	return t
}

// untilRE finds the end of the window in the agent's message (pkg/
// monitors/kernel.CloudEventFindings: "... from T until T2").
var untilRE = regexp.MustCompile(` until (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)`)

func until(msg string) time.Time {
	m := untilRE.FindStringSubmatch(msg)
	if m == nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		return time.Time{}
	}
	return t
}

// Record is a drain ahead of a scheduled event, as recorded on the Node.
type Record struct {
	// Reason is the agent's reason that started it.
	Reason string `json:"reason"`
	// Since is when the drain started.
	Since metav1.Time `json:"since"`
	// Cordoned: nodemend cordoned the Node for it (a cordon that was there
	// before is a person's, and stays).
	Cordoned bool `json:"cordoned"`
}

// Read returns the node's record, nil when it has none.
func Read(n *corev1.Node) (*Record, error) {
	v, ok := n.Annotations[Annotation]
	if !ok {
		return nil, nil
	}
	rec := &Record{}
	if err := json.Unmarshal([]byte(v), rec); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", Annotation, err)
	}
	return rec, nil
}

// Draining reports whether the node carries a record: it counts as
// disrupted for the pool's gate while it does.
func Draining(n *corev1.Node) bool {
	_, ok := n.Annotations[Annotation]
	return ok
}

// Start returns a copy of n cordoned (unless it was already) with rec
// recorded, rec.Cordoned set to whether this cordoned it.
func Start(n *corev1.Node, reason string, now time.Time) *corev1.Node {
	out := n.DeepCopy()
	rec := Record{Reason: reason, Since: metav1.NewTime(now.UTC().Truncate(time.Second)), Cordoned: !n.Spec.Unschedulable}
	data, _ := json.Marshal(rec)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[Annotation] = string(data)
	out.Spec.Unschedulable = true
	return out
}

// End returns a copy of n without the record, and without the cordon if
// the record says nodemend set it.
func End(n *corev1.Node, rec *Record) *corev1.Node {
	out := n.DeepCopy()
	delete(out.Annotations, Annotation)
	if rec != nil && rec.Cordoned {
		out.Spec.Unschedulable = false
	}
	return out
}
