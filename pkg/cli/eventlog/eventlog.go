// Package eventlog turns Kubernetes Events, whichever API wrote them
// (core/v1 by the kubelet and nodemend-agent, events.k8s.io/v1 by the
// scheduler, nodemend-controller and Karpenter), into one flat, ordered
// form that timeline and explain read, with nodemend-controller's repair
// record decoded (pkg/repair/history). It is pure.
package eventlog

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/history"
)

// Well-known reporters, as they name themselves in Events.
const (
	Scheduler  = "default-scheduler"
	Kubelet    = "kubelet"
	Karpenter  = "karpenter"
	Agent      = "nodemend-agent"
	Controller = "nodemend-repair"
)

// Event is one Event, flattened.
type Event struct {
	// First and Last are when it was first and last seen; they are equal
	// for an event seen once.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	Count int32     `json:"count"`
	Type  string    `json:"type"`
	// Reason is the machine-readable reason (FailedScheduling, NvidiaXID79Error, ...).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Source is the component that reported it (kubelet, karpenter, ...).
	Source string `json:"source"`
	// Kind and Name are the object it is about.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Repair is the controller's record of the repair step
	// (docs/repair-history.md); nil for everyone else's events and for the
	// controller's events of earlier versions, which are shown as they are.
	Repair *history.Record `json:"repair,omitempty"`
}

// FromCore flattens a core/v1 Event. Events written through events.k8s.io
// appear in core/v1 with EventTime and Series instead of the timestamps and
// count, and with ReportingController instead of Source.
func FromCore(e *corev1.Event) Event {
	out := Event{
		Type: e.Type, Reason: e.Reason, Message: e.Message,
		Kind: e.InvolvedObject.Kind, Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name,
		Source: e.Source.Component, Count: e.Count,
	}
	if out.Source == "" {
		out.Source = e.ReportingController
	}
	first := e.FirstTimestamp.Time
	if first.IsZero() {
		first = e.EventTime.Time
	}
	if first.IsZero() {
		first = e.CreationTimestamp.Time
	}
	last := e.LastTimestamp.Time
	if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
		last = e.Series.LastObservedTime.Time
		if out.Count < e.Series.Count {
			out.Count = e.Series.Count
		}
	}
	if last.IsZero() || last.Before(first) {
		last = first
	}
	if out.Count == 0 {
		out.Count = 1
	}
	if rec, ok := history.Read(e.Annotations); ok {
		out.Repair = &rec
	}
	out.First, out.Last = first, last
	return out
}

// FromCoreList flattens and sorts a list of Events, oldest first.
func FromCoreList(items []corev1.Event) []Event {
	out := make([]Event, 0, len(items))
	for i := range items {
		out = append(out, FromCore(&items[i]))
	}
	Sort(out)
	return out
}

// Sort orders events by first sight, then last, then reason, so that a
// merged list reads as a story.
func Sort(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		if c := a.Last.Compare(b.Last); c != 0 {
			return c
		}
		return cmp.Compare(a.Reason, b.Reason)
	})
}

// Latest returns the most recently seen event with one of reasons (any
// reason when none are given) from source (any source when empty).
func Latest(evs []Event, source string, reasons ...string) (Event, bool) {
	return pick(evs, source, reasons, func(e, best Event) bool { return !e.Last.Before(best.Last) })
}

// First returns the earliest event matching the same filter as Latest.
func First(evs []Event, source string, reasons ...string) (Event, bool) {
	return pick(evs, source, reasons, func(e, best Event) bool { return e.First.Before(best.First) })
}

// pick returns the event of source with one of reasons that better prefers
// over every other.
func pick(evs []Event, source string, reasons []string, better func(e, best Event) bool) (Event, bool) {
	var best Event
	found := false
	for _, e := range evs {
		if source != "" && e.Source != source {
			continue
		}
		if len(reasons) > 0 && !slices.Contains(reasons, e.Reason) {
			continue
		}
		if !found || better(e, best) {
			best, found = e, true
		}
	}
	return best, found
}
