// Package termsafe makes strings from the API safe to print on a terminal.
// Any string an API object carries (a condition message, an event, an
// annotation, a NodeDiagnostic's status) may hold bytes a terminal acts on:
// ESC and CSI sequences that move the cursor, clear the screen, set the
// window title or hide text; C1 controls (U+0080–U+009F, of which U+009B
// is a one-byte CSI); carriage returns that overwrite a line; and Unicode
// bidirectional controls that reorder what is shown (a "Trojan Source"
// attack). kubectl mend shows each of them as a visible escape instead —
// \x1b, \r, \u009b, \u202e — and an invalid UTF-8 byte as \xNN.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String escapes every terminal control in s, line breaks and tabs
// included: for a value that is shown on one line (a table cell, a
// message).
func String(s string) string { return escape(s, false) }

// Text is String that keeps line breaks and tabs: for whole documents
// (YAML, JSON, a multi-line error) whose layout they are.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepLayout bool) string {
	if !needs(s, keepLayout) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case dangerous(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needs(s string, keepLayout bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && !(keepLayout && (c == '\n' || c == '\t'))) || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || dangerous(r) {
			return true
		}
		i += size
	}
	return false
}

// dangerous are the non-ASCII runes a terminal acts on, or that change
// the order or the lines of what is shown.
func dangerous(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE RLE PDF LRO RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI RLI FSI PDI
		return true
	case r == 0x2028 || r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}
