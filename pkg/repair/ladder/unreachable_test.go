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

// The agent's heartbeat is read from the conditions only it writes: the
// kubelet's own heartbeat (Ready) says nothing about the agent.
func TestAgentSilent(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hb := func(typ string, at time.Time) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(at)}
	}
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		hb("Ready", t0.Add(20*time.Minute)), hb(string(health.KernelReady), t0), hb(string(health.StorageReady), t0.Add(time.Minute)),
	}}}
	if got := AgentHeartbeat(n); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("heartbeat %v", got)
	}
	if silent, _ := AgentSilent(n, t0.Add(16*time.Minute), DefaultAgentSilence); silent {
		t.Error("15 minutes after the last heartbeat: not yet silent")
	}
	if silent, why := AgentSilent(n, t0.Add(16*time.Minute+time.Second), DefaultAgentSilence); !silent || !strings.Contains(why, "15m1s ago") {
		t.Errorf("silent %v: %s", silent, why)
	}
	if silent, why := AgentSilent(&corev1.Node{}, t0, DefaultAgentSilence); !silent || !strings.Contains(why, "no condition") {
		t.Errorf("no agent: %v %s", silent, why)
	}
}

// A silent agent cannot carry out ResetAccelerator or Reboot: the ladder
// goes straight to the first rung the controller does itself.
func TestSkipUnreachable(t *testing.T) {
	l := Resolve(policy.Default(), false, health.ReasonNvidiaXID48Error) // ResetAccelerator, Reboot, Quarantine
	if p, skipped := SkipUnreachable(l, First, false); p != First || skipped != nil {
		t.Errorf("agent alive: %v %v", p, skipped)
	}
	p, skipped := SkipUnreachable(l, First, true)
	if At(l, p).Action != v1alpha1.LadderQuarantine || len(skipped) != 2 {
		t.Fatalf("agent silent: %v (%s), skipped %v", p, At(l, p).Action, skipped)
	}
	if msg := SkippedMessage(skipped, "its agent's last heartbeat was 20m0s ago", At(l, p).Action); msg != "ResetAccelerator, Reboot skipped: the node's agent carries them out and its agent's last heartbeat was 20m0s ago; going on with Quarantine" {
		t.Errorf("message %q", msg)
	}
	// From the second rung, and on a rung the controller does itself.
	if p, skipped := SkipUnreachable(l, Position{Rung: 1, Attempt: 2}, true); p.Rung != 2 || len(skipped) != 1 {
		t.Errorf("from Reboot: %v %v", p, skipped)
	}
	if p, skipped := SkipUnreachable(l, Position{Rung: 2, Attempt: 1}, true); p.Rung != 2 || skipped != nil {
		t.Errorf("on Quarantine: %v %v", p, skipped)
	}
	// A policy's ladder ending in Replace.
	own := policy.Default()
	own.Ladder = []policy.Rung{policy.NewRung(v1alpha1.LadderReboot), policy.NewRung(v1alpha1.LadderReplace)}
	if p, _ := SkipUnreachable(Resolve(own, true, ""), First, true); At(Resolve(own, true, ""), p).Action != v1alpha1.LadderReplace {
		t.Errorf("policy ladder: landed on %v", p)
	}
}
