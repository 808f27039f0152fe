package health

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Bounds of what nodemend writes into its conditions. The chart's admission
// policy refuses an agent's status write outside them (docs/security.md), so
// the agent keeps every write inside: the admission policy lists the same
// numbers and pattern (a test in deploy/deploytest compares them).
const (
	// MaxReasonLength bounds a condition's reason, in characters.
	MaxReasonLength = 128
	// MaxMessageLength bounds a condition's (and an Event's) message. The
	// policy counts characters (CEL's size()); BoundMessage cuts at this many
	// bytes, which is never more characters.
	MaxMessageLength = 1024
	// ReasonPattern is what a reason looks like: UpperCamelCase, letters and
	// digits, as every registry entry is.
	ReasonPattern = `^[A-Z][A-Za-z0-9]*$`
)

var reasonRE = regexp.MustCompile(ReasonPattern)

// ValidReason reports whether s may be a condition's reason.
func ValidReason(s string) bool {
	return len(s) <= MaxReasonLength && reasonRE.MatchString(s)
}

// BoundMessage makes s fit a condition or Event message: invalid UTF-8
// becomes U+FFFD (as JSON encoding would do, growing it), and a message
// over MaxMessageLength bytes is cut at a character boundary and ends in "…".
func BoundMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxMessageLength {
		return s
	}
	cut := MaxMessageLength - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
