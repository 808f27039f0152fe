package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/timeline"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/record"
)

var eventSeq atomic.Int32

// agentEvent writes a core/v1 Event as nodemend-agent's record.EventRecorder
// does (source component nodemend-agent, host = node).
func agentEvent(t *testing.T, node, reason, msg string, at time.Time) {
	t.Helper()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s.%d", node, eventSeq.Add(1))},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: "", APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "nodemend-agent", Host: node},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
	if _, err := core.CoreV1().Events("default").Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// controllerEvent writes an events.k8s.io/v1 Event as nodemend-controller's
// recorder (controller-runtime's GetEventRecorder) does, with the repair
// record when one is given (an earlier version wrote none).
func controllerEvent(t *testing.T, kind, name, reason, action, msg string, at time.Time, rec ...history.Record) {
	t.Helper()
	var ann map[string]string
	if len(rec) > 0 {
		ann = rec[0].Annotations()
	}
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s.%d", name, eventSeq.Add(1)), Annotations: ann},
		Regarding:  corev1.ObjectReference{Kind: kind, Name: name, APIVersion: "v1"},
		Reason:     reason, Action: action, Note: msg, Type: corev1.EventTypeNormal,
		EventTime:           metav1.NewMicroTime(at),
		ReportingController: "nodemend-repair", ReportingInstance: "nodemend-repair-controller-0",
	}
	if _, err := core.EventsV1().Events("default").Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// timelineJSON is `kubectl mend timeline NODE -o json`, decoded.
func timelineJSON(t *testing.T, node string) timeline.Timeline {
	t.Helper()
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "timeline", node, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatal(err)
	}
	return tl
}

func phaseMap(tl timeline.Timeline) map[string]timeline.Phase {
	m := map[string]timeline.Phase{}
	for _, p := range tl.Phases {
		m[p.Name] = p
	}
	return m
}

// TestTimelineGoneNode: the node and its NodeClaim are gone; the events
// that remain, and the replacement of the same NodePool, tell the story.
func TestTimelineGoneNode(t *testing.T) {
	t0 := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	node := "tl-gone"
	agentEvent(t, node, "NvidiaXID79Error", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", t0)
	since := t0.Add(2 * time.Second)
	controllerEvent(t, "Node", node, "NodeRepairBlocked", "Gate", "pool NodePool/tlgpu: 2 of 4 nodes unhealthy, more than the 1 that maxUnhealthy 20% allows; nothing there is repaired until that changes; re-checking every 5m0s", since.Add(10*time.Minute))
	controllerEvent(t, "Node", node, "NodeRepairStarted", "Taint", fmt.Sprintf("AcceleratedHardwareReady=False/NvidiaXID79Error since %s (toleration 10m0s, policy default): tainted nodemend.dev/repair:NoSchedule; drain Evict, deadline 10m0s; pool NodePool/tlgpu: 1 of 4 nodes unhealthy", since.UTC().Format(time.RFC3339)), since.Add(15*time.Minute),
		history.Record{Trigger: &history.Condition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaXID79Error"}, UnhealthySince: since,
			Toleration: metav1.Duration{Duration: 10 * time.Minute}, Policy: "default", Pool: &history.Pool{Kind: "NodePool", Name: "tlgpu"}})
	controllerEvent(t, "Node", node, "NodeRepairHandedOver", "Drain", "drained in 1m0s; handing the node to the karpenter backend: deleting NodeClaim tlgpu-x7k2p", since.Add(16*time.Minute),
		history.Record{Target: &history.Target{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "tlgpu-x7k2p"}, Took: metav1.Duration{Duration: time.Minute}})
	controllerEvent(t, "Node", node, "NodeRepairSucceeded", "Repair", "node gone 18m0s after it became unhealthy (AcceleratedHardwareReady)", since.Add(18*time.Minute))
	rep := createNode(t, testNode{name: "tl-replacement", labels: map[string]string{karpenter.NodePoolLabel: "tlgpu"},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, time.Now().Add(40*time.Second))}})
	_ = rep

	tl := timelineJSON(t, node)
	if !tl.Gone || tl.Trigger != "AcceleratedHardwareReady=False/NvidiaXID79Error" || tl.Owner != "NodeClaim tlgpu-x7k2p" || tl.Replacement != "tl-replacement" {
		t.Errorf("header: gone %v trigger %q owner %q replacement %q", tl.Gone, tl.Trigger, tl.Owner, tl.Replacement)
	}
	ph := phaseMap(tl)
	want := map[string]time.Duration{
		timeline.PhaseDetect: 2 * time.Second, timeline.PhaseToleration: 10 * time.Minute, timeline.PhaseBlocked: 5 * time.Minute,
		timeline.PhaseDrain: time.Minute, timeline.PhaseTerminate: 2 * time.Minute,
	}
	for name, d := range want {
		if p, ok := ph[name]; !ok || p.Duration != d || p.Ongoing {
			t.Errorf("phase %s: got %+v, want %s", name, p, d)
		}
	}
	if p := ph[timeline.PhaseReplacement]; p.Duration < 35*time.Second || p.Duration > 60*time.Second {
		t.Errorf("replacement phase %+v", p)
	}

	// The terminal view: bars and the events.
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "timeline", node)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Node tl-gone (gone)", "toleration", "██", "NodeRepairHandedOver", "nodemend-agent", "NvidiaXID79Error"} {
		if !strings.Contains(out, w) {
			t.Errorf("terminal view lacks %q", w)
		}
	}
}

// TestTimelineLiveNode: a node in the middle of its drain.
func TestTimelineLiveNode(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	node := "tl-live"
	createNode(t, testNode{name: node, annotations: map[string]string{
		record.StateAnnotation: fmt.Sprintf(`{"version":1,"phase":"Draining","unhealthySince":{"KernelReady":%q},"started":%q,`+
			`"trigger":{"type":"KernelReady","status":"False","reason":"ForkFailedOutOfPIDs"}}`,
			now.Add(-40*time.Minute).UTC().Format(time.RFC3339), now.Add(-5*time.Minute).UTC().Format(time.RFC3339))},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, now.Add(-48*time.Hour)),
			condition("KernelReady", corev1.ConditionFalse, "ForkFailedOutOfPIDs", "fork: retry: Resource temporarily unavailable", now.Add(-40*time.Minute))}})
	agentEvent(t, node, "ForkFailedOutOfPIDs", "kubelet: fork/exec /usr/bin/nsenter: resource temporarily unavailable", now.Add(-40*time.Minute))
	tl := timelineJSON(t, node)
	ph := phaseMap(tl)
	if tl.Gone || !ph[timeline.PhaseDrain].Ongoing || ph[timeline.PhaseToleration].Duration != 35*time.Minute {
		t.Errorf("phases %+v", tl.Phases)
	}
	if _, ok := ph[timeline.PhaseTerminate]; ok {
		t.Error("terminate phase before the hand-over")
	}
	if _, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "timeline", "tl-never-existed"); err == nil || !strings.Contains(err.Error(), "no events about it remain") {
		t.Errorf("unknown node: %v", err)
	}
}

// TestTimelineShowsTheLadder: a node no engine owns, rebooted twice without
// a new boot and quarantined, as the controller's events tell it: the
// remediate phase names each attempt, in JSON and in the terminal view.
func TestTimelineShowsTheLadder(t *testing.T) {
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	node := "tl-ladder"
	createNode(t, testNode{name: node, annotations: map[string]string{record.StateAnnotation: v1alpha1.RepairRecord{Phase: record.PhaseQuarantined,
		Started: metav1.NewTime(t0.Add(10 * time.Minute)), Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelBug"}}.Encode()},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, t0.Add(-48*time.Hour)),
			condition("KernelReady", corev1.ConditionFalse, "KernelBug", "BUG: unable to handle page fault", t0)}})
	controllerEvent(t, "Node", node, history.Started, "Taint", "KernelReady=False/KernelBug: tainted", t0.Add(10*time.Minute),
		history.Record{Trigger: &history.Condition{Type: "KernelReady", Status: "False", Reason: "KernelBug"}, UnhealthySince: t0,
			Toleration: metav1.Duration{Duration: 10 * time.Minute}, Policy: "bare-metal"})
	for i, at := range []time.Duration{12 * time.Minute, 27 * time.Minute} {
		rung := history.Record{Rung: &history.Rung{Action: "Reboot", Index: 1, Attempt: i + 1, Of: 2, Order: fmt.Sprintf("tl-ladder-reboot-%d", i+1)}}
		controllerEvent(t, "Node", node, history.RemediationOrdered, "Remediate", "Reboot ordered", t0.Add(at), rung)
		controllerEvent(t, "Node", node, history.RemediationFailed, "Remediate", "no new boot ID within 15m0s", t0.Add(at+15*time.Minute), rung)
	}
	controllerEvent(t, "Node", node, history.Quarantined, "Quarantine", "quarantined after Reboot 2/2", t0.Add(42*time.Minute))

	ph := phaseMap(timelineJSON(t, node))
	if p := ph[timeline.PhaseRemediate]; p.Note != "Reboot 1/2, Reboot 2/2" || p.Duration != 30*time.Minute {
		t.Errorf("remediate phase %+v, want both attempts over 30m", p)
	}
	if p, ok := ph[timeline.PhaseQuarantine]; !ok || !p.Ongoing {
		t.Errorf("quarantine phase %+v, want ongoing", p)
	}
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "timeline", node)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Reboot 1/2, Reboot 2/2", history.RemediationOrdered, history.Quarantined} {
		if !strings.Contains(out, w) {
			t.Errorf("terminal view lacks %q:\n%s", w, out)
		}
	}
}
