package ladder

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// orderAt is attempt a's order as the API server has it when created at
// created, and whether the controller creates it then.
func orderAt(a Attempt, created time.Time) (*v1alpha1.NodeRemediation, bool) {
	secs, ok := OrderSeconds(a, created)
	return &v1alpha1.NodeRemediation{
		ObjectMeta: metav1.ObjectMeta{Name: "order", CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: "n", Action: v1alpha1.HostReboot, BootID: "b", ActiveDeadlineSeconds: secs,
			Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: corev1.ConditionFalse, Reason: "KernelDeadlock"}},
	}, ok
}

// agentJudges is what an agent with the default skew bound, in the order's
// boot on a node under repair whose trigger is still reported, makes of o
// at now.
func agentJudges(o *v1alpha1.NodeRemediation, now time.Time) remediate.Judgement {
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{record.Taint("KernelReady")}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b"},
			Conditions: []corev1.NodeCondition{{Type: "KernelReady", Status: corev1.ConditionFalse}}}}
	return remediate.Judge(o, remediate.Facts{NodeName: "n", BootID: "b", Now: now, MaxSkew: remediate.DefaultMaxClockSkew, Node: node,
		Enabled: map[v1alpha1.HostAction]bool{v1alpha1.HostReboot: true}})
}

// TestOrdersCanBeStartedByAnAgentWithTheDefaultSkew: for every rung timeout
// the API admits, an order the controller creates is one an agent with the
// default clock-skew bound starts when it sees the order a few seconds after
// its creation (the real node found every 1m-timeout order refused as past
// its deadline), and the order is dead before the attempt's timeout, so the
// ladder never moves on while it could still be carried out.
func TestOrdersCanBeStartedByAnAgentWithTheDefaultSkew(t *testing.T) {
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for timeout := time.Minute; timeout <= 2*time.Hour; timeout += 15 * time.Second {
		a := Attempt{Started: metav1.NewTime(created), Timeout: metav1.Duration{Duration: timeout}}
		o, ok := orderAt(a, created)
		secs := o.Spec.ActiveDeadlineSeconds
		if !ok || secs < 10 || secs > 3600 {
			t.Fatalf("timeout %s: created %v, activeDeadlineSeconds %d outside the API's 10..3600", timeout, ok, secs)
		}
		if o.Deadline().After(a.Deadline().Add(-10 * time.Second)) {
			t.Fatalf("timeout %s: the order lives %ds, not 10s shorter than the attempt", timeout, secs)
		}
		if want := min(max(timeout/3, 50*time.Second), timeout-10*time.Second, time.Hour); time.Duration(secs)*time.Second != want.Truncate(time.Second) {
			t.Fatalf("timeout %s: the order lives %ds, want %s (a third of the timeout, at least 50s, 10s short of it, at most 1h)", timeout, secs, want)
		}
		if j := agentJudges(o, created.Add(5*time.Second)); j.Verdict != remediate.Act {
			t.Fatalf("timeout %s (order deadline %ds): an agent seeing it after 5s judges %s: %s", timeout, secs, j.Verdict, j.Message)
		}
	}
}

// "By the time the ladder moves on, the previous order is dead": an order
// created late — found missing after the controller was away — gets what is
// left of the life an order created on time would have had, never a fresh
// deadline; once too little is left for an agent to start it, and at or
// after the attempt's timeout, none is created at all. Whenever it is
// created, no agent starts it at or after the attempt's deadline.
func TestAnOrderCreatedLateNeverOutlivesItsAttempt(t *testing.T) {
	started := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	a := Attempt{Action: v1alpha1.LadderReboot, Started: metav1.NewTime(started), Timeout: metav1.Duration{Duration: 15 * time.Minute}}
	life := OrderLife(a)
	if life != 5*time.Minute {
		t.Fatalf("life %s, want 5m (a third of 15m)", life)
	}
	for _, c := range []struct {
		late   time.Duration
		ok     bool
		secs   int64
		starts bool // an agent seeing it 2s after its creation starts it
	}{
		{0, true, 300, true},
		{1500 * time.Millisecond, true, 298, true},
		{2 * time.Minute, true, 180, true},
		{life - 33*time.Second, true, 33, true},
		{life - 31*time.Second, true, 31, false},
		{life - 30*time.Second, false, 0, false},
		{life, false, 0, false},
		{10 * time.Minute, false, 0, false},
		{15 * time.Minute, false, 0, false}, // the attempt's timeout
		{20 * time.Minute, false, 0, false},
	} {
		created := started.Add(c.late)
		o, ok := orderAt(a, created)
		if ok != c.ok || o.Spec.ActiveDeadlineSeconds != c.secs {
			t.Errorf("created %s late: ok %v, %ds; want %v, %ds", c.late, ok, o.Spec.ActiveDeadlineSeconds, c.ok, c.secs)
			continue
		}
		if !ok {
			continue
		}
		if o.Deadline().After(started.Add(life)) {
			t.Errorf("created %s late: the order ends at %s, after one created on time", c.late, o.Deadline())
		}
		if j := agentJudges(o, created.Add(2*time.Second)); (j.Verdict == remediate.Act) != c.starts {
			t.Errorf("created %s late, seen 2s later: %s (%s), want started %v", c.late, j.Verdict, j.Message, c.starts)
		}
		for _, seen := range []time.Duration{0, 10 * time.Second, time.Minute} {
			if j := agentJudges(o, a.Deadline().Add(seen)); j.Verdict == remediate.Act {
				t.Errorf("created %s late: an agent starts it %s after the attempt's deadline", c.late, seen)
			}
		}
	}
}
