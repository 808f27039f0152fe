package controller_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/outofservice"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// withAgentSilence judges agents' silence with the controller's default
// bound (15 minutes).
func withAgentSilence(o *controller.Options) { o.AgentSilence = 0 }

// faultHeartbeat sets a fault that started at since, as an agent that last
// wrote it at heartbeat.
func (h *harness) faultHeartbeat(name string, since, heartbeat time.Time) {
	h.t.Helper()
	c := repairtest.Condition("KernelReady", corev1.ConditionFalse, "KernelDeadlock", since)
	c.LastHeartbeatTime = metav1.NewTime(heartbeat)
	if err := repairtest.SetCondition(h.ctx, k8s, name, c); err != nil {
		h.t.Fatal(err)
	}
}

// A node whose agent has not heartbeated for longer than the bound cannot
// carry out a Reboot: the ladder skips it, says so, and quarantines the
// node at once instead of waiting out the Reboot's 15-minute timeout. A
// node whose agent heartbeats gets its Reboot order as before.
func TestLadderSkipsAgentRungsOfASilentAgent(t *testing.T) {
	h := start(t, withLadder, withAgentSilence)
	for i := range 10 {
		h.node(fmt.Sprintf("ds-%d", i))
	}
	// ds-0's agent last wrote at the fault's start, 30 minutes before it
	// is due; ds-1's wrote a minute before.
	h.faultHeartbeat("ds-0", h.t0, h.t0)
	h.faultHeartbeat("ds-1", h.t0, h.t0.Add(29*time.Minute))
	h.waitRecorded("ds-0")
	h.waitRecorded("ds-1")
	h.advanceTo(h.t0.Add(30 * time.Minute))

	h.eventually("ds-0 quarantined", func() bool { return h.phase("ds-0") == string(record.PhaseQuarantined) })
	h.waitEvent("ds-0", "NodeRemediationFailed", "Reboot skipped: the node's agent carries them out and its agent's last heartbeat was 30m0s ago")
	if o := h.orders("ds-0"); len(o) != 0 {
		t.Errorf("orders %v for a node whose agent is silent", o)
	}
	h.waitOrder("ds-1", v1alpha1.HostReboot)
	if a := h.attempt("ds-1"); a == nil || a.Action != v1alpha1.LadderReboot {
		t.Errorf("ds-1's attempt %+v, want Reboot", a)
	}
}

// hasOutOfService reports Kubernetes' out-of-service taint on the node.
func (h *harness) hasOutOfService(name string) bool {
	n := h.get(name)
	return n != nil && outofservice.Has(n)
}

// A dead node (kubelet Ready Unknown, agent silent) that the ladder
// quarantines gets the out-of-service taint once the drain deadline has
// passed — not before — so that its pods and volumes move; the taint goes
// when the kubelet is Ready again, and the quarantine stays for a person.
func TestOutOfServiceTaintOnADeadQuarantinedNode(t *testing.T) {
	h := start(t, withLadder, withAgentSilence)
	for i := range 10 {
		h.node(fmt.Sprintf("dn-%d", i))
	}
	h.faultHeartbeat("dn-0", h.t0, h.t0)
	h.fault("dn-0", corev1.NodeReady, corev1.ConditionUnknown, "NodeStatusUnknown", h.t0)
	h.waitRecorded("dn-0")
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.eventually("dn-0 quarantined", func() bool { return h.phase("dn-0") == string(record.PhaseQuarantined) })
	h.consistently("no out-of-service taint before the drain deadline", func() bool { return !h.hasOutOfService("dn-0") })

	h.advance(10 * time.Minute) // the default drain deadline, from the repair's start
	h.eventually("out-of-service taint", func() bool { return h.hasOutOfService("dn-0") })
	h.waitEvent("dn-0", "NodeOutOfService", "its kubelet and its agent have stopped reporting")
	if r := h.record("dn-0"); r.OutOfService.IsZero() {
		t.Errorf("record %+v does not say nodemend put the taint", r.Record)
	}

	h.fault("dn-0", corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", h.clock.Now())
	h.eventually("out-of-service taint off", func() bool { return !h.hasOutOfService("dn-0") })
	h.waitEvent("dn-0", "NodeOutOfServiceLifted", "kubelet is Ready again")
	if h.phase("dn-0") != string(record.PhaseQuarantined) || !h.tainted("dn-0") {
		t.Errorf("dn-0 left quarantine (phase %s): a person releases it", h.phase("dn-0"))
	}
}
