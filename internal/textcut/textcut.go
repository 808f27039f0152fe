// Package textcut shortens text that goes into messages: error messages
// that quote bad input, condition and status messages with an API limit.
// Cuts fall on UTF-8 character boundaries, so a cut never makes valid text
// invalid.
package textcut

import "unicode/utf8"

// Mark ends text that Ellipsis cut.
const Mark = "..."

// Head returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func Head[T ~string | ~[]byte](s T, n int) T {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Ellipsis returns s if it has at most n bytes, otherwise its Head that
// leaves room for Mark, followed by Mark: at most n bytes in all.
func Ellipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Head(s, n-len(Mark)) + Mark
}
