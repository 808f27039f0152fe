package eventlog

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/repair/controller"
)

// The plugin repeats the controller's event reasons; they must not drift.
func TestReasonsMatchController(t *testing.T) {
	pairs := map[string]string{
		RepairRecovered: controller.EventRecovered, RepairBlocked: controller.EventBlocked, RepairWouldStart: controller.EventWouldStart,
		RepairStarted: controller.EventStarted, RepairDrainBlocked: controller.EventDrainBlocked, RepairDrainForced: controller.EventDrainForced,
		RepairHandedOver: controller.EventHandedOver, RepairTargetDeleted: controller.EventTargetDeleted, RepairSucceeded: controller.EventSucceeded,
		RepairFailed: controller.EventFailed, RepairInvalidState: controller.EventInvalidState, Controller: controller.Name,
	}
	for ours, theirs := range pairs {
		if ours != theirs {
			t.Errorf("%q != controller's %q", ours, theirs)
		}
	}
}

func TestFromCore(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		e           corev1.Event
		first, last time.Time
		count       int32
		source      string
	}{
		{"core/v1 (record)", corev1.Event{Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: metav1.NewTime(t0), LastTimestamp: metav1.NewTime(t0.Add(time.Minute)), Count: 3},
			t0, t0.Add(time.Minute), 3, "kubelet"},
		{"events.k8s.io (series)", corev1.Event{ReportingController: "default-scheduler", EventTime: metav1.NewMicroTime(t0),
			Series: &corev1.EventSeries{Count: 5, LastObservedTime: metav1.NewMicroTime(t0.Add(2 * time.Minute))}}, t0, t0.Add(2 * time.Minute), 5, "default-scheduler"},
		{"events.k8s.io (single)", corev1.Event{ReportingController: "nodemend-repair", EventTime: metav1.NewMicroTime(t0)}, t0, t0, 1, "nodemend-repair"},
	}
	for _, tc := range cases {
		got := FromCore(&tc.e)
		if !got.First.Equal(tc.first) || !got.Last.Equal(tc.last) || got.Count != tc.count || got.Source != tc.source {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}
