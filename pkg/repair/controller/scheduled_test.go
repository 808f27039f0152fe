package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/scheduled"
)

// agentReport writes the Warning that node's agent writes for a cloud's
// scheduled event (pkg/agent/events: core/v1, the default namespace,
// source and reporting controller nodemend-agent on the node), last seen
// at the harness's now. mutate forges it.
func (h *harness) agentReport(node, reason, msg string, mutate ...func(*corev1.Event)) *corev1.Event {
	h.t.Helper()
	now := metav1.NewTime(h.clock.Now())
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, h.clock.Now().UnixNano()), Namespace: metav1.NamespaceDefault},
		// The agent names its Node by name for a UID, as the kubelet
		// does (pkg/agent/exporter).
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Reason:              reason,
		Message:             msg,
		Type:                corev1.EventTypeWarning,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Source:              corev1.EventSource{Component: scheduled.Agent, Host: node},
		ReportingController: scheduled.Agent,
		ReportingInstance:   node,
	}
	for _, m := range mutate {
		m(e)
	}
	if err := k8s.Create(h.ctx, e); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, e) })
	return e
}

const maintenance = "the cloud scheduled system-reboot (instance-event-0123) for this instance from 2026-12-07T03:00:00Z (in 23h0m0s)"

func (h *harness) cordoned(name string) bool {
	n := h.get(name)
	return n != nil && n.Spec.Unschedulable
}

// drainingAhead: cordoned with the scheduled drain's record, and never
// tainted or put under repair for it.
func (h *harness) drainingAhead(name string) bool {
	h.t.Helper()
	n := h.get(name)
	if n == nil {
		h.t.Fatalf("%s is gone: a scheduled drain never deletes a node", name)
	}
	if record.HasTaint(n) || record.InRepair(n) {
		h.t.Fatalf("%s tainted or under repair for a scheduled event: %v %v", name, n.Spec.Taints, n.Annotations)
	}
	return n.Spec.Unschedulable && scheduled.Draining(n)
}

// schedPool is a NodePool of n nodes under a policy that drains on
// scheduled events (action Drain) unless action is "".
func (h *harness) schedPool(np string, n int, action v1alpha1.ScheduledEventAction) []string {
	h.t.Helper()
	spec := v1alpha1.NodeRepairPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"karpenter.sh/nodepool": np}}}
	if action != "" {
		spec.ScheduledEvents = &v1alpha1.ScheduledEventsPolicy{Action: action}
	}
	h.policy(np, spec)
	return h.karpenterPool(np, n)
}

// Off by default: a policy that does not ask (and a policy that says
// Ignore) leaves a node with a scheduled event alone.
func TestScheduledEventIgnoredByDefault(t *testing.T) {
	h := start(t)
	def := h.schedPool("sedef", 3, "")
	ign := h.schedPool("seign", 3, v1alpha1.ScheduledEventIgnore)
	h.agentReport(def[0], "ScheduledMaintenance", maintenance)
	h.agentReport(ign[0], "SpotInterruption", "the spot instance will be terminated at 2026-12-06T05:02:00Z (in 2m0s)")
	h.consistently("nodes with scheduled events left alone", func() bool {
		return !h.cordoned(def[0]) && !h.cordoned(ign[0]) && h.untouched(def[0]) && h.untouched(ign[0])
	})
	if evs := h.events(def[0], "NodeScheduledDrain"); len(evs) != 0 {
		t.Errorf("NodeScheduledDrain with the default policy: %+v", evs)
	}
}

// On: the node is cordoned and its pods evicted (never tainted, rebooted
// or deleted); the cordon is lifted once the agent's report is over.
func TestScheduledEventDrainsAheadAndUncordonsWhenOver(t *testing.T) {
	h := start(t)
	nodes := h.schedPool("sedr", 3, v1alpha1.ScheduledEventDrain)
	if err := repairtest.Namespace(h.ctx, k8s, "sedr"); err != nil {
		t.Fatal(err)
	}
	must[*corev1.Pod](t)(repairtest.Pod(h.ctx, k8s, "sedr", "web", nodes[0], repairtest.OwnedBy("apps/v1", "ReplicaSet", "web")))
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance)
	h.eventually(nodes[0]+" cordoned ahead of the event", func() bool { return h.drainingAhead(nodes[0]) })
	h.eventually("web evicted", func() bool { return h.podTerminating("sedr", "web") })
	h.waitEvent(nodes[0], "NodeScheduledDrain", "system-reboot")
	if !h.untouched(nodes[1]) || h.cordoned(nodes[1]) {
		t.Error("a node without an event touched")
	}

	// The agent reports a standing event every hour; 70 minutes without a
	// report is the event gone.
	h.advance(69 * time.Minute)
	h.consistently("still cordoned within the report's freshness", func() bool { return h.drainingAhead(nodes[0]) })
	h.advance(time.Minute)
	h.eventually(nodes[0]+" uncordoned", func() bool {
		n := h.get(nodes[0])
		return !n.Spec.Unschedulable && !scheduled.Draining(n)
	})
	h.waitEvent(nodes[0], "NodeScheduledDrainEnded", "cordon lifted")
	if h.gone(nodes[0]) || !h.untouched(nodes[0]) {
		t.Error("the node was deleted or put under repair")
	}
}

// The agent's Event gone (the API server's event TTL, or deleted) is the
// event gone; a cordon that was there before the drain is a person's and
// stays.
func TestScheduledEventGoneUncordonsOnlyItsOwnCordon(t *testing.T) {
	h := start(t)
	nodes := h.schedPool("segone", 5, v1alpha1.ScheduledEventDrain)
	// segone-1 was cordoned by a person before its event.
	n := h.get(nodes[1])
	n.Spec.Unschedulable = true
	if err := k8s.Update(h.ctx, n); err != nil {
		t.Fatal(err)
	}
	e0 := h.agentReport(nodes[0], "ScheduledMaintenance", maintenance)
	h.eventually(nodes[0]+" cordoned", func() bool { return h.drainingAhead(nodes[0]) })
	if err := k8s.Delete(h.ctx, e0); err != nil {
		t.Fatal(err)
	}
	h.eventually(nodes[0]+" uncordoned once its event is gone", func() bool { return !h.cordoned(nodes[0]) && !scheduled.Draining(h.get(nodes[0])) })

	e1 := h.agentReport(nodes[1], "ScheduledMaintenance", maintenance)
	h.eventually(nodes[1]+" recorded", func() bool { return h.drainingAhead(nodes[1]) })
	if err := k8s.Delete(h.ctx, e1); err != nil {
		t.Fatal(err)
	}
	h.eventually(nodes[1]+" record removed", func() bool { return !scheduled.Draining(h.get(nodes[1])) })
	h.waitEvent(nodes[1], "NodeScheduledDrainEnded", "cordoned before, and stays so")
	if !h.cordoned(nodes[1]) {
		t.Error("a person's cordon was lifted")
	}
}

// The drain ahead goes through the repair's gates: a pool counts a node so
// drained as out of service, so with maxUnhealthy 20% of 3 (1) a second
// node's event waits; a control-plane node is skipped by default.
func TestScheduledDrainRespectsTheGates(t *testing.T) {
	h := start(t)
	nodes := h.schedPool("segate", 3, v1alpha1.ScheduledEventDrain)
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance)
	h.eventually(nodes[0]+" cordoned", func() bool { return h.drainingAhead(nodes[0]) })
	h.agentReport(nodes[1], "SpotInterruption", "the spot instance will be terminated at 2026-12-06T05:02:00Z (in 2m0s)")
	ev := h.waitEvent(nodes[1], "NodeRepairBlocked", "not drained ahead of the cloud's scheduled event (SpotInterruption)")
	if !strings.Contains(ev.Message, "2 of 3 nodes") {
		t.Errorf("blocked message %q does not count the drained node and this one", ev.Message)
	}
	h.consistently(nodes[1]+" not cordoned while the pool is at its limit", func() bool { return !h.cordoned(nodes[1]) })

	cp := "segate-cp"
	h.policy(cp, v1alpha1.NodeRepairPolicySpec{
		NodeSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/sched": cp}},
		MaxUnhealthy:    ptr(intstr.FromString("100%")),
		ScheduledEvents: &v1alpha1.ScheduledEventsPolicy{Action: v1alpha1.ScheduledEventDrain},
	})
	h.node(cp, repairtest.Labels("example.com/sched", cp, "node-role.kubernetes.io/control-plane", ""))
	h.agentReport(cp, "ScheduledMaintenance", maintenance)
	h.waitEvent(cp, "NodeRepairBlocked", "control-plane")
	if h.cordoned(cp) {
		t.Error("a control-plane node was cordoned without its policy opting it in")
	}
}

// Only the node's own agent is believed: an Event about the node from
// another component, from another node's agent, or of another type, is
// not evidence.
func TestScheduledEventEvidenceIsTheNodesOwnAgent(t *testing.T) {
	h := start(t)
	nodes := h.schedPool("seforge", 3, v1alpha1.ScheduledEventDrain)
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance, func(e *corev1.Event) {
		e.Source.Component, e.ReportingController = "someone-else", "someone-else"
	})
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance, func(e *corev1.Event) {
		e.Name += "-b"
		e.Source.Host, e.ReportingInstance = nodes[1], nodes[1]
	})
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance, func(e *corev1.Event) {
		e.Name += "-c"
		e.Type = corev1.EventTypeNormal
	})
	h.consistently("no drain on forged evidence", func() bool { return !h.cordoned(nodes[0]) })
	// The same report, written as the agent, is believed.
	h.agentReport(nodes[0], "ScheduledMaintenance", maintenance, func(e *corev1.Event) { e.Name += "-d" })
	h.eventually(nodes[0]+" cordoned on its agent's report", func() bool { return h.drainingAhead(nodes[0]) })
}
