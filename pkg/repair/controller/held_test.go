package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
)

// A decision's event waits for the node's next reconcile: none is sent
// before it, each is sent once, in the order held, and other nodes' events
// stay held.
func TestDecisionEventsWaitForTheNodesNextStep(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{recorder: rec}
	ev := func(node, reason string) event {
		return event{regarding: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, eventType: corev1.EventTypeNormal, reason: reason, action: "Repair", note: node}
	}
	r.emitWithNextStep("a", ev("a", "NodeRepairStarted"))
	r.emitWithNextStep("a", ev("a", "Second"))
	r.emitWithNextStep("b", ev("b", "NodeRepairStarted"))
	if n := len(rec.Events); n != 0 {
		t.Fatalf("%d events sent before the node's next step", n)
	}
	r.sendHeld("a")
	r.sendHeld("a")
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 2 || !strings.Contains(got[0], "NodeRepairStarted") || !strings.Contains(got[1], "Second") {
		t.Errorf("sent %q, want a's two events once, in order", got)
	}
	r.sendHeld("b")
	if len(rec.Events) != 1 {
		t.Errorf("b's event: %d sent, want 1", len(rec.Events))
	}
}
