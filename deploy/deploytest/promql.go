package deploytest

import (
	"regexp"
	"sort"
	"strings"
)

// promqlKeywords are PromQL words that are neither metrics nor functions.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlToken    = regexp.MustCompile(`[A-Za-z0-9_:.$]+\s*\(?`)
)

// MetricNames returns the metric names a PromQL expression selects. It is a
// small lexer, not a parser: strings, label matchers, ranges and grouping
// labels are dropped, and of the remaining words those followed by "(" are
// functions or aggregations, numbers and keywords are skipped.
func MetricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, tok := range promqlToken.FindAllString(s, -1) {
		if strings.HasSuffix(tok, "(") {
			continue
		}
		tok = strings.TrimSpace(tok)
		if c := tok[0]; (c >= '0' && c <= '9') || c == '.' || c == '$' || promqlKeywords[strings.ToLower(tok)] {
			continue
		}
		seen[tok] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
