package scheduled

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

func report(node string, seen time.Time) corev1.Event {
	return corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: "default", Name: node + ".1"},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node},
		Reason:              "ScheduledMaintenance",
		Message:             "the cloud scheduled system-reboot (e-1) for this instance from 2026-12-06T06:00:00Z (in 2h0m0s) until 2026-12-06T08:00:00Z",
		Type:                corev1.EventTypeWarning,
		LastTimestamp:       metav1.NewTime(seen),
		Source:              corev1.EventSource{Component: Agent, Host: node},
		ReportingController: Agent,
		ReportingInstance:   node,
	}
}

// Each field that names the writer and the subject is checked on its own:
// an Event that is not the node's own agent's is no evidence.
func TestFromAgentChecksEveryField(t *testing.T) {
	if e := report("n1", now); !FromAgent("n1", &e) {
		t.Fatal("the agent's own report refused")
	}
	for name, forge := range map[string]func(*corev1.Event){
		"another node":              func(e *corev1.Event) { e.InvolvedObject.Name = "n2" },
		"not a Node":                func(e *corev1.Event) { e.InvolvedObject.Kind = "Pod" },
		"namespaced object":         func(e *corev1.Event) { e.InvolvedObject.Namespace = "x" },
		"another namespace":         func(e *corev1.Event) { e.Namespace = "kube-system" },
		"Normal":                    func(e *corev1.Event) { e.Type = corev1.EventTypeNormal },
		"another reason":            func(e *corev1.Event) { e.Reason = "KernelDeadlock" },
		"source component":          func(e *corev1.Event) { e.Source.Component = "kubelet" },
		"source host":               func(e *corev1.Event) { e.Source.Host = "n2" },
		"reporting controller":      func(e *corev1.Event) { e.ReportingController = "kubelet" },
		"reporting instance":        func(e *corev1.Event) { e.ReportingInstance = "n2" },
		"no source at all (events)": func(e *corev1.Event) { e.Source = corev1.EventSource{} },
	} {
		e := report("n1", now)
		forge(&e)
		if FromAgent("n1", &e) {
			t.Errorf("%s: believed", name)
		}
		if _, ok := Evidence("n1", []corev1.Event{e}, now); ok {
			t.Errorf("%s: evidence", name)
		}
	}
}

func TestEvidenceIsFreshAndWithinTheWindow(t *testing.T) {
	e := report("n1", now)
	r, ok := Evidence("n1", []corev1.Event{e}, now)
	if !ok || !r.Until.Equal(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("got %+v %v", r, ok)
	}
	if !r.Expires().Equal(now.Add(Fresh)) {
		t.Errorf("expires %s, want the report's freshness %s", r.Expires(), now.Add(Fresh))
	}
	if _, ok := Evidence("n1", []corev1.Event{e}, now.Add(Fresh-time.Second)); !ok {
		t.Error("over before its freshness ended")
	}
	if _, ok := Evidence("n1", []corev1.Event{e}, now.Add(Fresh)); ok {
		t.Error("a report older than Fresh believed")
	}
	// A later report is believed until the window's end.
	late := report("n1", now.Add(3*time.Hour))
	if _, ok := Evidence("n1", []corev1.Event{late}, now.Add(3*time.Hour+59*time.Minute)); !ok {
		t.Error("over within the window")
	}
	if _, ok := Evidence("n1", []corev1.Event{late}, now.Add(4*time.Hour)); ok {
		t.Error("believed after the window's end")
	}
	// A time ahead of the controller's clock counts as now.
	ahead := report("n1", now.Add(time.Hour))
	if r, ok := Evidence("n1", []corev1.Event{ahead}, now); !ok || !r.Seen.Equal(now) {
		t.Errorf("a report from ahead: %+v %v", r, ok)
	}
}

func TestStartAndEnd(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	s := Start(n, "SpotInterruption", now)
	rec, err := Read(s)
	if err != nil || rec == nil || !rec.Cordoned || !s.Spec.Unschedulable || n.Spec.Unschedulable {
		t.Fatalf("start: %+v %v %+v", rec, err, s.Spec)
	}
	if e := End(s, rec); e.Spec.Unschedulable || Draining(e) {
		t.Errorf("end of its own cordon: %+v %v", e.Spec, e.Annotations)
	}
	n.Spec.Unschedulable = true // a person's cordon
	s = Start(n, "SpotInterruption", now)
	rec, _ = Read(s)
	if rec.Cordoned {
		t.Error("a person's cordon claimed")
	}
	if e := End(s, rec); !e.Spec.Unschedulable {
		t.Error("a person's cordon lifted")
	}
}
