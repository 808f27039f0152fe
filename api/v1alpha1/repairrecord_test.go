package v1alpha1

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func full() RepairRecord {
	t := func(m int) metav1.Time { return metav1.NewTime(time.Date(2026, 3, 1, 12, m, 0, 0, time.UTC)) }
	return RepairRecord{
		Phase:          RepairPhaseQuarantined,
		UnhealthySince: map[corev1.NodeConditionType]metav1.Time{"KernelReady": t(0)},
		Trigger:        &RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelDeadlock"},
		Policy:         "default", Started: t(30), Drained: t(34), Failed: t(50),
		Rung: &RungAttempt{RungPosition: RungPosition{Rung: 1, Attempt: 2}, Action: LadderReboot, Of: 2, Order: "n1-reboot-0a1b2c3d4e",
			BootID: "b1", Started: t(35), Timeout: metav1.Duration{Duration: 10 * time.Minute}, Verified: t(38)},
		Ladder: &LadderRecord{RungPosition: RungPosition{Rung: 0, Attempt: 1}, Action: LadderResetAccelerator, Condition: "KernelReady",
			Returned: t(10), Until: t(40)},
		Quarantined: t(51), HealthySince: t(55), Cordoned: true,
		Target:    &RepairTarget{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "nc", UID: "u"},
		RepairNow: &RepairNowRequest{Request: "INC-1", At: t(29)},
	}
}

// The JSON is an interface (docs/repair.md, and admission webhooks read
// it): its field names and forms do not change within a version.
func TestRecordJSONIsStable(t *testing.T) {
	want := `{"version":1,"phase":"Quarantined","unhealthySince":{"KernelReady":"2026-03-01T12:00:00Z"},` +
		`"trigger":{"type":"KernelReady","status":"False","reason":"KernelDeadlock"},"policy":"default",` +
		`"started":"2026-03-01T12:30:00Z","drained":"2026-03-01T12:34:00Z","failed":"2026-03-01T12:50:00Z",` +
		`"rung":{"rung":1,"attempt":2,"action":"Reboot","of":2,"order":"n1-reboot-0a1b2c3d4e","bootID":"b1","started":"2026-03-01T12:35:00Z","timeout":"10m0s","verified":"2026-03-01T12:38:00Z"},` +
		`"ladder":{"rung":0,"attempt":1,"action":"ResetAccelerator","condition":"KernelReady","returned":"2026-03-01T12:10:00Z","until":"2026-03-01T12:40:00Z"},` +
		`"quarantined":"2026-03-01T12:51:00Z","healthySince":"2026-03-01T12:55:00Z","cordoned":true,` +
		`"target":{"backend":"karpenter","apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"nc","uid":"u"},` +
		`"repairNow":{"request":"INC-1","at":"2026-03-01T12:29:00Z"}}`
	if got := full().Encode(); got != want {
		t.Errorf("Encode =\n%s\nwant\n%s", got, want)
	}
	back, err := DecodeRepairRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	if back.Encode() != want {
		t.Errorf("round trip =\n%s", back.Encode())
	}
	// What is not set is not written.
	small := RepairRecord{UnhealthySince: map[corev1.NodeConditionType]metav1.Time{"Ready": metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}}
	if got := small.Encode(); got != `{"version":1,"unhealthySince":{"Ready":"2026-03-01T12:00:00Z"}}` {
		t.Errorf("small record = %s", got)
	}
	if (RepairRecord{}).Encode() != "" || (RepairRecord{Version: 1}).Encode() != "" {
		t.Error("the zero record is written")
	}
}

// A duration or time that does not parse is an error, never a zero.
func TestDecodeSurfacesBadValues(t *testing.T) {
	good := full().Encode()
	for _, bad := range []string{
		strings.Replace(good, `"10m0s"`, `"ten minutes"`, 1),
		strings.Replace(good, `"2026-03-01T12:30:00Z"`, `"half past"`, 1),
		strings.Replace(good, `"version":1`, `"version":2`, 1),
		strings.Replace(good, `"phase":"Quarantined"`, `"phase":"Resting"`, 1),
		strings.Replace(good, `"action":"Reboot"`, `"action":"Pray"`, 1),
		strings.Replace(good, `"10m0s"`, `"-1m"`, 1),
	} {
		if r, err := DecodeRepairRecord(bad); err == nil {
			t.Errorf("accepted %s as %+v", bad, r)
		}
	}
}

func FuzzDecodeRepairRecord(f *testing.F) {
	f.Add(full().Encode())
	f.Add(`{"version":1}`)
	f.Add(`{"version":1,"rung":{"timeout":"1h"}}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeRepairRecord(s)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := DecodeRepairRecord(r.Encode())
		if err != nil && !r.IsZero() {
			t.Fatalf("%q decoded, its encoding %q does not: %v", s, r.Encode(), err)
		}
		if err == nil && again.Encode() != r.Encode() {
			t.Fatalf("%q: %q then %q", s, r.Encode(), again.Encode())
		}
	})
}
