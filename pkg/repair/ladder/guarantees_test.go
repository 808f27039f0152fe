package ladder

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

// The guarantees of docs/repair.md (The ladder) that these pure functions
// carry, one test each; the table "What fails if a guarantee breaks" in
// docs/repair.md points here.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func rebootAttempt() Attempt {
	return Attempt{RungPosition: First, Action: v1alpha1.LadderReboot, Of: 1, Order: "n1-reboot-x", BootID: "b1",
		Started: metav1.NewTime(t0), Timeout: metav1.Duration{Duration: 15 * time.Minute}}
}

func resetAttempt() Attempt {
	a := rebootAttempt()
	a.Action, a.Timeout = v1alpha1.LadderResetAccelerator, metav1.Duration{Duration: 5 * time.Minute}
	return a
}

func orderIn(p v1alpha1.RemediationPhase) *v1alpha1.NodeRemediation {
	return &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: "o"}, Status: v1alpha1.NodeRemediationStatus{Phase: p, Message: "m"}}
}

// "A reboot counts only when the Node's status.nodeInfo.bootID differs from
// the one recorded with the attempt": a Node that reports no boot ID at all
// (its kubelet has not reported yet, or it re-registered) has not shown a
// new boot, nor has an attempt recorded without one, whatever else looks
// healthy and whatever the agent says.
func TestARebootIsNeverVerifiedWithoutABootIDOnBothSides(t *testing.T) {
	healthy := func(now time.Time, boot string) Observation {
		return Observation{Now: now, BootID: boot, Order: orderIn(v1alpha1.RemediationSucceeded), TriggerHealthy: true, KubeletReady: true}
	}
	noneRecorded := rebootAttempt()
	noneRecorded.BootID = ""
	for _, c := range []struct {
		name string
		a    Attempt
		o    Observation
	}{
		{"the Node reports no boot ID", rebootAttempt(), healthy(t0.Add(time.Minute), "")},
		{"the attempt recorded no boot ID", noneRecorded, healthy(t0.Add(time.Minute), "b2")},
		{"neither has one", noneRecorded, healthy(t0.Add(time.Minute), "")},
	} {
		got := Judge(c.a, c.o)
		if got.Verdict != Wait {
			t.Errorf("%s, before the deadline: %s (%s), want Wait", c.name, got.Verdict, got.Message)
		}
		c.o.Now = c.a.Deadline()
		got = Judge(c.a, c.o)
		if got.Verdict != Failed || !strings.Contains(got.Message, "no new boot ID") {
			t.Errorf("%s, at the deadline: %s (%s), want Failed: no new boot ID", c.name, got.Verdict, got.Message)
		}
	}
}

// A new boot seen, but the kubelet not Ready past the timeout: the attempt
// fails, and says why (the kubelet, not the condition).
func TestARebootedNodeMustBeReadyByTheDeadline(t *testing.T) {
	a := rebootAttempt()
	got := Judge(a, Observation{Now: a.Deadline(), BootID: "b2", TriggerHealthy: true})
	if got.Verdict != Failed || !strings.Contains(got.Message, "rebooted (boot b1 → b2)") || !strings.Contains(got.Message, "kubelet is not Ready") {
		t.Errorf("not Ready at the deadline: %+v", got)
	}
	got = Judge(a, Observation{Now: a.Deadline(), BootID: "b2", KubeletReady: true})
	if got.Verdict != Failed || !strings.Contains(got.Message, "triggering condition is still unhealthy") {
		t.Errorf("unhealthy at the deadline: %+v", got)
	}
	// One second earlier the same node is still waited for.
	if got := Judge(a, Observation{Now: a.Deadline().Add(-time.Second), BootID: "b2", TriggerHealthy: true}); got.Verdict != Rebooted || !got.Wake.Equal(a.Deadline()) {
		t.Errorf("before the deadline: %+v", got)
	}
}

// "A reset counts when the agent reports Succeeded and the condition is
// healthy", the kubelet Ready, before the timeout; the agent reporting the
// reset Failed or Refused ends the attempt at once.
func TestAResetCountsOnlyReportedHealthyAndReady(t *testing.T) {
	a := resetAttempt()
	soon := t0.Add(time.Minute)
	for _, c := range []struct {
		name string
		o    Observation
		want Verdict
		says string
	}{
		{"succeeded, healthy, kubelet not Ready", Observation{Now: soon, Order: orderIn(v1alpha1.RemediationSucceeded), TriggerHealthy: true}, Wait, ""},
		{"succeeded, healthy, Ready", Observation{Now: soon, Order: orderIn(v1alpha1.RemediationSucceeded), TriggerHealthy: true, KubeletReady: true}, Repaired, ""},
		{"the agent reports it failed", Observation{Now: soon, Order: orderIn(v1alpha1.RemediationFailed), TriggerHealthy: true, KubeletReady: true}, Failed, "reset Failed"},
		{"the agent refused", Observation{Now: soon, Order: orderIn(v1alpha1.RemediationRefused), TriggerHealthy: true, KubeletReady: true}, Failed, "reset Refused"},
		{"accepted, past the deadline", Observation{Now: a.Deadline(), Order: orderIn(v1alpha1.RemediationAccepted)}, Failed, "no reset reported within 5m0s (order Accepted)"},
		{"no order, past the deadline", Observation{Now: a.Deadline()}, Failed, "no reset reported within 5m0s (order not picked up by the agent)"},
		{"succeeded, never healthy", Observation{Now: a.Deadline(), Order: orderIn(v1alpha1.RemediationSucceeded), KubeletReady: true}, Failed, "reset, but the triggering condition is still unhealthy"},
		{"succeeded, healthy, never Ready", Observation{Now: a.Deadline(), Order: orderIn(v1alpha1.RemediationSucceeded), TriggerHealthy: true}, Failed, "reset, but the kubelet is not Ready"},
		// A reset is not verified by a boot: a new boot ID proves nothing
		// about the GPUs.
		{"a new boot, no report", Observation{Now: soon, BootID: "b2", TriggerHealthy: true, KubeletReady: true}, Wait, ""},
	} {
		got := Judge(a, c.o)
		if got.Verdict != c.want || !strings.Contains(got.Message, c.says) {
			t.Errorf("%s: %+v, want %s saying %q", c.name, got, c.want, c.says)
		}
	}
	// A reboot rung is failed early by the agent's report as well, and says
	// so; late, it says the boot did not change.
	r := rebootAttempt()
	if got := Judge(r, Observation{Now: t0.Add(time.Minute), BootID: "b1", Order: orderIn(v1alpha1.RemediationFailed)}); got.Verdict != Failed || !strings.Contains(got.Message, "reboot Failed: m") {
		t.Errorf("reboot failed: %+v", got)
	}
	if got := Judge(r, Observation{Now: r.Deadline(), BootID: "b1"}); got.Verdict != Failed || !strings.Contains(got.Message, "no new boot ID within 15m0s (still b1; order not picked up by the agent)") {
		t.Errorf("reboot late: %+v", got)
	}
	// Quarantine and Replace have no order to judge.
	q := r
	q.Action = v1alpha1.LadderQuarantine
	if got := Judge(q, Observation{Now: t0}); got.Verdict != Failed {
		t.Errorf("Judge of a rung without an order: %+v", got)
	}
}

// Next and At never index past a ladder, however it was shortened since
// the position was recorded (a policy changed mid-repair), and walk any
// ladder they are given, not only the three rungs a policy can have.
func TestNextAndAtOnAnyLadder(t *testing.T) {
	r := func(a v1alpha1.LadderAction, attempts int) policy.Rung {
		x := policy.NewRung(a)
		x.Attempts = attempts
		return x
	}
	l := []policy.Rung{r(v1alpha1.LadderResetAccelerator, 1), r(v1alpha1.LadderReboot, 1), r(v1alpha1.LadderReboot, 2), r(v1alpha1.LadderQuarantine, 1)}
	want := []Position{{Rung: 0, Attempt: 1}, {Rung: 1, Attempt: 1}, {Rung: 2, Attempt: 1}, {Rung: 2, Attempt: 2}, {Rung: 3, Attempt: 1}, {Rung: 3, Attempt: 1}}
	p := First
	for i, w := range want {
		if p != w {
			t.Fatalf("step %d: %v, want %v", i, p, w)
		}
		p = Next(l, p)
	}
	// Exactly one past the end, and further.
	for _, beyond := range []Position{{Rung: len(l), Attempt: 1}, {Rung: len(l) + 3, Attempt: 2}} {
		if got := Next(l, beyond); got != (Position{Rung: len(l) - 1, Attempt: 1}) {
			t.Errorf("Next beyond the ladder (%v): %v", beyond, got)
		}
		if got := At(l, beyond); got.Action != v1alpha1.LadderQuarantine {
			t.Errorf("At beyond the ladder (%v): %s", beyond, got.Action)
		}
	}
	if got := At(l, Position{Rung: len(l) - 1, Attempt: 1}); got.Action != v1alpha1.LadderQuarantine {
		t.Errorf("At the last rung: %s", got.Action)
	}
	if got := At(l, Position{Rung: 1, Attempt: 1}); got.Action != v1alpha1.LadderReboot || got.Attempts != 1 {
		t.Errorf("At rung 1: %+v", got)
	}
}

// "After the window the record is removed and a later fault starts at the
// first rung": no record, another condition, or a window that ended (at
// Until exactly) start a new decision.
func TestStartAtWithoutAnOpenWindow(t *testing.T) {
	l := Resolve(policy.Default(), false, health.ReasonNvidiaXID48Error)
	if p, ok := StartAt(l, nil, "KernelReady", t0); ok || p != First {
		t.Errorf("no record: %v %v", p, ok)
	}
	rec := &Record{RungPosition: First, Action: v1alpha1.LadderResetAccelerator, Condition: "AcceleratedHardwareReady",
		Returned: metav1.NewTime(t0), Until: metav1.NewTime(t0.Add(time.Hour))}
	if p, ok := StartAt(l, rec, "AcceleratedHardwareReady", t0.Add(time.Hour-time.Second)); !ok || p != (Position{Rung: 1, Attempt: 1}) {
		t.Errorf("in the window: %v %v", p, ok)
	}
	if p, ok := StartAt(l, rec, "AcceleratedHardwareReady", t0.Add(time.Hour)); ok || p != First {
		t.Errorf("window ended: %v %v", p, ok)
	}
}

// The agent's heartbeat is the newest of the conditions only it writes,
// whatever their order on the Node, and a newer condition of another
// writer (the kubelet's, a third party's) never stands for it.
func TestAgentHeartbeatIsTheNewestOwnedCondition(t *testing.T) {
	hb := func(typ health.ConditionType, at time.Time) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(at)}
	}
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		hb(health.StorageReady, t0.Add(2*time.Minute)), hb("Ready", t0.Add(30*time.Minute)), hb(health.KernelReady, t0),
		hb("ThirdPartyReady", t0.Add(40*time.Minute)), hb(health.NetworkingReady, t0.Add(time.Minute)),
	}}}
	if got := AgentHeartbeat(n); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("heartbeat %v, want %v", got, t0.Add(2*time.Minute))
	}
	if silent, _ := AgentSilent(n, t0.Add(17*time.Minute+time.Second), DefaultAgentSilence); !silent {
		t.Error("the kubelet's and a third party's heartbeats kept a silent agent alive")
	}
}

// SkipUnreachable stops at the ladder's last rung even when that rung is
// one the agent carries out (a ladder not resolved by Resolve): it never
// moves a position off the ladder.
func TestSkipUnreachableStaysOnTheLadder(t *testing.T) {
	l := []policy.Rung{policy.NewRung(v1alpha1.LadderResetAccelerator), policy.NewRung(v1alpha1.LadderReboot)}
	p, skipped := SkipUnreachable(l, First, true)
	if p != (Position{Rung: 1, Attempt: 1}) || len(skipped) != 1 || skipped[0] != v1alpha1.LadderResetAccelerator {
		t.Errorf("%v, skipped %v", p, skipped)
	}
}
