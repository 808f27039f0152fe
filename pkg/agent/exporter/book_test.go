package exporter

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// A fault raised first by a stream (NVML's double-bit ECC event) and then
// seen by a check (the DBE counter) is the check's from then on: it stays
// past the quiet period while the check sees it, and recovers when the check
// passes. A stream fault the check does not see keeps its quiet period.
func TestCheckTakesOverAFaultAStreamRaised(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	b := newBook()
	m, _ := health.LookupMonitor("nvidia")
	b.setMonitors([]health.Monitor{m})
	dbe, _ := health.LookupReason(health.ReasonNvidiaDoubleBitError)
	xid79, _ := health.LookupReason(health.ReasonNvidiaXID79Error)
	d := func(r health.Reason, subject, msg string) Detection {
		return Detection{Reason: r, Finding: detection.Finding{Reason: r.Name, Subject: subject, Message: msg, Observed: now}}
	}
	status := func() (corev1.ConditionStatus, string) {
		conds, _ := b.desired(now)
		for _, c := range conds {
			if c.Type == corev1.NodeConditionType(health.AcceleratedHardwareReady) {
				return c.Status, c.Reason
			}
		}
		return "", ""
	}
	b.observe(d(dbe, "0000:2b:00", "double-bit ECC error reported by an NVML event"), now)
	b.observe(d(xid79, "0000:3b:00", "XID 79"), now)
	// XID 79 needs a reboot, the double-bit error a GPU reset: the heavier
	// remedy names the condition.
	if s, r := status(); s != corev1.ConditionFalse || r != health.ReasonNvidiaXID79Error {
		t.Fatalf("after the event: %s %s", s, r)
	}
	owned := []string{health.ReasonNvidiaDoubleBitError}
	b.checkResult(owned, []Detection{d(dbe, "0000:2b:00", "1 uncorrectable (double-bit) ECC errors")}, now)

	now = now.Add(2 * time.Hour)
	b.expire(now)
	if s, r := status(); s != corev1.ConditionFalse || r != health.ReasonNvidiaDoubleBitError {
		t.Fatalf("the check still sees it two hours on: %s %s", s, r)
	}
	if _, ok := b.conds[health.AcceleratedHardwareReady].faults[faultKey{health.ReasonNvidiaXID79Error, "0000:3b:00"}]; ok {
		t.Fatal("the XID 79 the check does not own expired after its quiet period")
	}
	b.checkResult(owned, nil, now) // the GPU was reset: the counter is back at zero
	if s, _ := status(); s != corev1.ConditionTrue {
		t.Fatalf("after the reset: %s", s)
	}
}
