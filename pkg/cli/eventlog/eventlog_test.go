package eventlog

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/history"
)

// The reporter name the plugin looks for is the controller's (the reasons
// and records come from pkg/repair/history, shared by both).
func TestReporterIsTheController(t *testing.T) {
	if Controller != controller.Name {
		t.Errorf("%q != controller's %q", Controller, controller.Name)
	}
}

// The controller's record rides on its Events and is decoded; a record of
// an unknown version, or none, leaves the event plain.
func TestFromCoreReadsTheRepairRecord(t *testing.T) {
	rec := history.Record{Trigger: &history.Condition{Type: "KernelReady", Status: "False", Reason: "KernelBug"}, Policy: "default"}
	e := corev1.Event{ObjectMeta: metav1.ObjectMeta{Annotations: rec.Annotations()}, ReportingController: Controller, Reason: history.Started}
	got := FromCore(&e)
	if got.Repair == nil || got.Repair.Trigger.String() != "KernelReady=False/KernelBug" || got.Repair.Policy != "default" {
		t.Errorf("record not read: %+v", got.Repair)
	}
	for _, ann := range []map[string]string{nil, {history.Annotation: `{"v":99,"policy":"x"}`}, {history.Annotation: "not json"}} {
		e.Annotations = ann
		if got := FromCore(&e); got.Repair != nil {
			t.Errorf("%v: read as %+v", ann, got.Repair)
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
