package timeline

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/record"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ev(source, reason, msg string, at time.Duration) eventlog.Event {
	return eventlog.Event{Source: source, Reason: reason, Message: msg, First: t0.Add(at), Last: t0.Add(at), Count: 1, Kind: "Node", Name: "n"}
}

// withRecord attaches the controller's record, as eventlog decodes it.
func withRecord(e eventlog.Event, r history.Record) eventlog.Event {
	r.V = history.Version
	e.Repair = &r
	return e
}

func unhealthyNode(ago time.Duration, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann, CreationTimestamp: metav1.NewTime(t0.Add(-48 * time.Hour))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-48 * time.Hour))},
			{Type: "StorageReady", Status: corev1.ConditionFalse, Reason: "FilesystemReadOnly", LastTransitionTime: metav1.NewTime(t0.Add(-ago))}}}}
}

func TestBuild(t *testing.T) {
	cases := []struct {
		name   string
		in     Input
		phases map[string]time.Duration // name → duration; -1 means ongoing (any length)
	}{
		{"tolerating now", Input{Name: "n", Node: unhealthyNode(0, nil), Now: t0.Add(5 * time.Minute),
			Events: []eventlog.Event{ev(eventlog.Agent, "FilesystemReadOnly", "EXT4-fs error: remounting read-only", -3*time.Second)}},
			map[string]time.Duration{PhaseDetect: 3 * time.Second, PhaseToleration: -1}},
		{"recovered before the toleration", Input{Name: "n", Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, Now: t0.Add(time.Hour),
			Events: []eventlog.Event{
				ev(eventlog.Controller, history.Blocked, "x", 40*time.Minute), // unrelated to a toleration: no start record
				ev(eventlog.Controller, history.Recovered, "conditions healthy again before the toleration passed; repair clock reset", 7*time.Minute),
			}},
			map[string]time.Duration{}},
		{"dry run says what it would do", Input{Name: "n", Node: nil, Now: t0.Add(time.Hour),
			Events: []eventlog.Event{withRecord(ev(eventlog.Controller, history.WouldStart,
				"dry run: would taint, drain and replace this node: KernelReady=False/KernelBug since 2026-03-01T12:00:00Z (toleration 30m0s, policy default); pool cluster: 1 of 3 nodes unhealthy", 30*time.Minute),
				history.Record{Trigger: &history.Condition{Type: "KernelReady", Status: "False", Reason: "KernelBug"}, UnhealthySince: t0,
					Toleration: metav1.Duration{Duration: 30 * time.Minute}, Policy: "default", Pool: &history.Pool{Kind: "Cluster"}})}},
			map[string]time.Duration{PhaseDetect: 0, PhaseToleration: 30 * time.Minute}},
		{"repair recorded on the node", Input{Name: "n", Now: t0.Add(20 * time.Minute), Node: unhealthyNode(0, map[string]string{
			record.StateAnnotation: `{"version":1,"phase":"Terminating","unhealthySince":{"StorageReady":"2026-03-01T12:00:00Z"},` +
				`"trigger":{"type":"StorageReady","status":"False","reason":"FilesystemReadOnly"},"started":"2026-03-01T12:10:00Z","drained":"2026-03-01T12:12:00Z",` +
				`"target":{"backend":"node","apiVersion":"v1","kind":"Node","name":"n","uid":"u"}}`})},
			map[string]time.Duration{PhaseDetect: 0, PhaseToleration: 10 * time.Minute, PhaseDrain: 2 * time.Minute, PhaseTerminate: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl := Build(tc.in)
			got := map[string]Phase{}
			for _, p := range tl.Phases {
				got[p.Name] = p
			}
			if len(got) != len(tc.phases) {
				t.Fatalf("phases %+v, want %v", tl.Phases, tc.phases)
			}
			for name, d := range tc.phases {
				p, ok := got[name]
				switch {
				case !ok:
					t.Errorf("no phase %s", name)
				case d == -1 && !p.Ongoing:
					t.Errorf("%s not ongoing: %+v", name, p)
				case d >= 0 && (p.Duration != d || p.Ongoing):
					t.Errorf("%s: %+v, want %s", name, p, d)
				}
			}
		})
	}
}

// The timeline reads the controller's records, not its notes: rewording
// every note changes nothing, and the same events without records (an
// earlier version's) are listed as they are but tell no toleration, trigger
// or target.
func TestBuildReadsRecordsNotNotes(t *testing.T) {
	since := t0
	started := history.Record{Trigger: &history.Condition{Type: "StorageReady", Status: "False", Reason: "FilesystemReadOnly"},
		UnhealthySince: since, Toleration: metav1.Duration{Duration: 30 * time.Minute}, Policy: "default"}
	handed := history.Record{Target: &history.Target{Backend: "clusterapi", APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Namespace: "capi", Name: "md-0-abc"}}
	events := func(note string, records bool) []eventlog.Event {
		evs := []eventlog.Event{
			ev(eventlog.Controller, history.Started, note, 31*time.Minute),
			ev(eventlog.Controller, history.HandedOver, note, 33*time.Minute),
			ev(eventlog.Controller, history.Succeeded, note, 40*time.Minute),
		}
		if records {
			evs[0], evs[1] = withRecord(evs[0], started), withRecord(evs[1], handed)
		}
		return evs
	}
	for _, note := range []string{"anything at all", "Reparatur begonnen (Toleranz 5m, deleting NodeClaim x)"} {
		tl := Build(Input{Name: "n", Now: t0.Add(time.Hour), Events: events(note, true)})
		ph := map[string]Phase{}
		for _, p := range tl.Phases {
			ph[p.Name] = p
		}
		if tl.Trigger != "StorageReady=False/FilesystemReadOnly" || tl.Owner != "Machine capi/md-0-abc" {
			t.Errorf("%q: trigger %q owner %q", note, tl.Trigger, tl.Owner)
		}
		if ph[PhaseToleration].Duration != 30*time.Minute || ph[PhaseDrain].Duration != 2*time.Minute || ph[PhaseTerminate].Duration != 7*time.Minute {
			t.Errorf("%q: phases %+v", note, tl.Phases)
		}
	}
	old := Build(Input{Name: "n", Now: t0.Add(time.Hour), Events: events("AcceleratedHardwareReady=False/NvidiaXID79Error since 2026-03-01T12:00:00Z (toleration 10m0s, policy default): deleting NodeClaim x-1", false)})
	if old.Trigger != "" || old.Owner != "" || len(old.Entries) != 3 {
		t.Errorf("an earlier version's events: trigger %q owner %q, %d entries", old.Trigger, old.Owner, len(old.Entries))
	}
	for _, e := range old.Entries {
		if e.Message == "" || e.What == "" {
			t.Errorf("entry not shown as it is: %+v", e)
		}
	}
}

// A ladder repair: drain until the first order, remediate (the rungs
// ordered) until the quarantine, quarantine until the release.
func TestBuildShowsTheLadder(t *testing.T) {
	started := history.Record{Trigger: &history.Condition{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"},
		UnhealthySince: t0, Toleration: metav1.Duration{Duration: 30 * time.Minute}, Policy: "default"}
	reboot := history.Record{Rung: &history.Rung{Action: "Reboot", Index: 1, Attempt: 1, Of: 1, Order: "n-reboot-1"}}
	evs := []eventlog.Event{
		withRecord(ev(eventlog.Controller, history.Started, "x", 30*time.Minute), started),
		withRecord(ev(eventlog.Controller, history.RemediationOrdered, "x", 32*time.Minute), reboot),
		withRecord(ev(eventlog.Controller, history.RemediationFailed, "x", 47*time.Minute), reboot),
		ev(eventlog.Controller, history.Quarantined, "x", 47*time.Minute),
		ev(eventlog.Controller, history.QuarantineReleased, "x", 120*time.Minute),
	}
	tl := Build(Input{Name: "n", Now: t0.Add(3 * time.Hour), Events: evs})
	ph := map[string]Phase{}
	for _, p := range tl.Phases {
		ph[p.Name] = p
	}
	want := map[string]time.Duration{PhaseDrain: 2 * time.Minute, PhaseRemediate: 15 * time.Minute, PhaseQuarantine: 73 * time.Minute}
	for name, d := range want {
		if p, ok := ph[name]; !ok || p.Duration != d || p.Ongoing {
			t.Errorf("phase %s = %+v, want %s", name, p, d)
		}
	}
	if n := ph[PhaseRemediate].Note; n != "Reboot 1/1" {
		t.Errorf("remediate note %q", n)
	}
	if _, ok := ph[PhaseTerminate]; ok {
		t.Error("a terminate phase for a node that was never handed over")
	}
}
