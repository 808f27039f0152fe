package history

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The reasons are an interface (dashboards, alerts, kubectl mend): this
// test is the list, spelled out, so that changing one is a deliberate act.
func TestReasonsAreTheDocumentedOnes(t *testing.T) {
	for got, want := range map[string]string{
		Recovered: "NodeRecovered", Blocked: "NodeRepairBlocked", WouldStart: "NodeRepairWouldStart", Started: "NodeRepairStarted",
		DrainBlocked: "NodeDrainBlocked", DrainForced: "NodeDrainDeadlineExceeded", HandedOver: "NodeRepairHandedOver",
		TargetDeleted: "NodeRepairTargetDeleted", Succeeded: "NodeRepairSucceeded", Failed: "NodeRepairFailed",
		InvalidState: "NodeRepairStateInvalid", InvalidPolicy: "NodeRepairPolicyInvalid",
	} {
		if got != want {
			t.Errorf("reason %q, documented %q", got, want)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := Record{
		Trigger: &Condition{Type: "AcceleratedHardwareReady", Status: "False", Reason: "NvidiaXID79Error"}, UnhealthySince: since,
		Toleration: metav1.Duration{Duration: 10 * time.Minute}, Policy: "gpu", Pool: &Pool{Kind: "NodePool", Name: "gpu"},
		Drain:  &Drain{Mode: "Evict", Deadline: metav1.Duration{Duration: 10 * time.Minute}, Refused: 2},
		Target: &Target{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "gpu-x7k2p"},
	}
	ann := in.Annotations()
	if want := `{"v":1,"trigger":{"type":"AcceleratedHardwareReady","status":"False","reason":"NvidiaXID79Error"},"unhealthySince":"2026-03-01T12:00:00Z","toleration":"10m0s","policy":"gpu","pool":{"kind":"NodePool","name":"gpu"},"drain":{"mode":"Evict","deadline":"10m0s","refused":2},"target":{"backend":"karpenter","apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"gpu-x7k2p"}}`; ann[Annotation] != want {
		t.Errorf("encoded\n%s\nwant\n%s", ann[Annotation], want)
	}
	out, ok := Read(ann)
	if !ok || out.Trigger.String() != "AcceleratedHardwareReady=False/NvidiaXID79Error" || !out.UnhealthySince.Equal(since) ||
		out.Toleration.Duration != 10*time.Minute || out.Target.String() != "NodeClaim gpu-x7k2p" || out.Drain.Refused != 2 {
		t.Errorf("decoded %+v", out)
	}
	if empty := (Record{}).Annotations()[Annotation]; empty != `{"v":1}` {
		t.Errorf("an empty record is %s", empty)
	}
}

// Records of another version, or unreadable ones, are not read: the event
// is shown as it is.
func TestReadRefuses(t *testing.T) {
	for _, ann := range []map[string]string{nil, {}, {Annotation: ""}, {Annotation: "{"}, {Annotation: `{"v":2,"policy":"x"}`}, {Annotation: `{"policy":"x"}`}} {
		if r, ok := Read(ann); ok {
			t.Errorf("%v read as %+v", ann, r)
		}
	}
}

// The trigger is the Node record's type: an Event's record says it in the
// same JSON.
func TestConditionIsTheRecordsTrigger(t *testing.T) {
	r := Record{Trigger: &Condition{Type: "Ready", Status: "Unknown"}}
	if got := r.Annotations()[Annotation]; got != `{"v":1,"trigger":{"type":"Ready","status":"Unknown"}}` {
		t.Errorf("record = %s", got)
	}
	if s := (Condition{Type: "KernelReady", Status: "False", Reason: "KernelBug"}).String(); s != "KernelReady=False/KernelBug" {
		t.Errorf("String = %q", s)
	}
}
