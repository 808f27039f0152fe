package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/workflow"
)

// TestOrdersCanBeStartedByAnAgentWithTheDefaultSkew: for every rung timeout
// the API admits, an order the controller creates is one an agent with the
// default clock-skew bound starts when it sees the order a few seconds after
// its creation (the real node found every 1m-timeout order refused as past
// its deadline), and the order is dead before the attempt's timeout, so the
// ladder never moves on while it could still be carried out.
func TestOrdersCanBeStartedByAnAgentWithTheDefaultSkew(t *testing.T) {
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	// The node as the agent reads it: under repair, in the order's boot,
	// its trigger still reported.
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{workflow.Taint("KernelReady")}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b"},
			Conditions: []corev1.NodeCondition{{Type: "KernelReady", Status: corev1.ConditionFalse}}}}
	for timeout := time.Minute; timeout <= 2*time.Hour; timeout += 15 * time.Second {
		secs := orderDeadline(ladder.Attempt{Timeout: metav1.Duration{Duration: timeout}})
		o := &v1alpha1.NodeRemediation{
			ObjectMeta: metav1.ObjectMeta{Name: "order", CreationTimestamp: metav1.NewTime(created)},
			Spec: v1alpha1.NodeRemediationSpec{NodeName: "n", Action: v1alpha1.HostReboot, BootID: "b", ActiveDeadlineSeconds: secs,
				Reason: "KernelReady=False/KernelDeadlock"},
		}
		if secs < 10 || secs > 3600 {
			t.Fatalf("timeout %s: activeDeadlineSeconds %d outside the API's 10..3600", timeout, secs)
		}
		if o.Deadline().Sub(created) >= timeout {
			t.Fatalf("timeout %s: the order lives %ds, not shorter than the attempt", timeout, secs)
		}
		seen := created.Add(5 * time.Second)
		j := remediate.Judge(o, remediate.Facts{NodeName: "n", BootID: "b", Now: seen, MaxSkew: remediate.DefaultMaxClockSkew, Node: node,
			Enabled: map[v1alpha1.HostAction]bool{v1alpha1.HostReboot: true}})
		if j.Verdict != remediate.Act {
			t.Fatalf("timeout %s (order deadline %ds): an agent seeing it after 5s judges %s: %s", timeout, secs, j.Verdict, j.Message)
		}
	}
}
