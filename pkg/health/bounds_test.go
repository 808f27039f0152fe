package health

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Every reason the agent can write fits the admission policy's bounds.
func TestEveryReasonFitsTheBounds(t *testing.T) {
	for _, r := range Reasons() {
		if !ValidReason(r.Name) {
			t.Errorf("reason %q does not match %s (≤ %d characters)", r.Name, ReasonPattern, MaxReasonLength)
		}
	}
	for _, m := range Monitors() {
		if !ValidReason(m.HealthyReason) {
			t.Errorf("healthy reason %q of %s does not match %s", m.HealthyReason, m.Name, ReasonPattern)
		}
	}
	for _, bad := range []string{"", "lowerCase", "With Space", "Colon:Reason", strings.Repeat("A", MaxReasonLength+1), "Évident"} {
		if ValidReason(bad) {
			t.Errorf("%q is accepted", bad)
		}
	}
}

func TestBoundMessage(t *testing.T) {
	for name, in := range map[string]string{
		"short":             "fork rejected",
		"exactly the bound": strings.Repeat("a", MaxMessageLength),
		"1 MiB":             strings.Repeat("a", 1<<20),
		"multibyte at cut":  strings.Repeat("a", MaxMessageLength-2) + "日本語",
		"all multibyte":     strings.Repeat("日", MaxMessageLength),
		"invalid UTF-8":     strings.Repeat("\xff", MaxMessageLength),
		"invalid, short":    "GPU \xc3\x28 fell off",
	} {
		out := BoundMessage(in)
		if len(out) > MaxMessageLength || !utf8.ValidString(out) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", name, len(out), utf8.ValidString(out))
		}
		if utf8.RuneCountInString(out) > MaxMessageLength {
			t.Errorf("%s: %d characters", name, utf8.RuneCountInString(out))
		}
		if len(in) <= MaxMessageLength && utf8.ValidString(in) && out != in {
			t.Errorf("%s: a message within the bound changed: %q", name, out)
		}
		if len(in) > MaxMessageLength && !strings.HasSuffix(out, "…") {
			t.Errorf("%s: a cut message must say so", name)
		}
	}
}
