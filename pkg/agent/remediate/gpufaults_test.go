package remediate

import (
	"testing"

	"nodemend.dev/nodemend/pkg/health"
)

func TestIsPCIAddress(t *testing.T) {
	for s, want := range map[string]bool{"0000:3b:00": true, "0000:3b:00.0": true, "00000001:3B:1f.7": true, "GPU 0": false, "": false,
		"0000:3b:00.8": false, "000:3b:00": false, "0000:3b:0g": false, "0000:3b": false, "0000:3b:00.01": false} {
		if got := isPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, want %v", s, got, want)
		}
	}
}

// A reset of 0000:3b:00.0 resolves the reset-class XID on that GPU only; a
// fault a reset does not resolve (XID 79) stays, and one named by a DCGM
// entity is neither a candidate nor cleared until every GPU was reset.
func TestResetCandidatesAndClears(t *testing.T) {
	if !ResetCandidate(health.ReasonNvidiaXID48Error, "0000:3b:00") || ResetCandidate(health.ReasonNvidiaXID79Error, "0000:86:00") ||
		ResetCandidate(health.ReasonNvidiaXID48Error, "GPU 0") {
		t.Error("ResetCandidate: want XID 48 on a PCI address only")
	}
	one := ClearedByReset([]string{"0000:3b:00.0"}, false)
	for _, c := range []struct {
		reason, subject string
		want            bool
	}{
		{health.ReasonNvidiaXID48Error, "0000:3b:00", true},
		{health.ReasonNvidiaXID48Error, "0000:5d:00", false},
		{health.ReasonNvidiaXID79Error, "0000:3b:00", false},
		{health.ReasonDCGMHealthCode125, "GPU 0", false},
	} {
		if got := one(c.reason, c.subject); got != c.want {
			t.Errorf("after 3b's reset, cleared %s on %s = %v, want %v", c.reason, c.subject, got, c.want)
		}
	}
	if !ClearedByReset(nil, true)(health.ReasonDCGMHealthCode125, "GPU 0") {
		t.Error("a DCGM entity's reset-class fault stays after every GPU's reset")
	}
}
