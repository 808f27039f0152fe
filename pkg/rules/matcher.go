package rules

import (
	"errors"
	"fmt"
	"math/bits"
	"regexp"
	"slices"
	"strings"

	"nodemend.dev/nodemend/pkg/logline"
)

// Matcher applies a compiled rule set to lines. It is safe for concurrent use.
type Matcher struct {
	rules []compiled
	// pre finds the rules whose anchor occurs in a line, in one pass.
	pre *prefilter
}

type compiled struct {
	logline.Rule
	re *regexp.Regexp
	// named is whether re has named groups; without, a cheaper MatchString
	// does.
	named bool
	// anchor is the longest literal of Contains: the one most likely to be
	// absent, found by the prefilter; rest are checked only when it occurs.
	anchor string
	rest   []string
}

// Compile validates rules and prepares them for matching. All the problems
// found are reported, each with the index and reason of its rule.
func Compile(rs []logline.Rule) (*Matcher, error) {
	var errs []error
	m := &Matcher{}
	for i, r := range rs {
		where := fmt.Sprintf("rule %d (%s)", i, r.Reason)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
		}
		if r.Reason == "" {
			bad("reason is required")
		}
		for _, src := range r.Sources {
			if src != logline.Kmsg && src != logline.Journal && src != logline.File {
				bad("unknown source %q (want %q, %q or %q)", src, logline.Kmsg, logline.Journal, logline.File)
			}
		}
		if len(r.Accept) == 0 {
			bad("Accept is required: the provenance of the lines the rule believes (kernel, systemd, unit:NAME, root, file, file:PATH)")
		}
		for _, p := range r.Accept {
			if err := p.Validate(); err != nil {
				bad("%v", err)
			}
		}
		lits := slices.DeleteFunc(slices.Clone(r.Contains), func(s string) bool { return s == "" })
		if len(lits) == 0 {
			bad("at least one non-empty Contains literal is required as a prefilter")
		}
		for _, x := range r.Exclude {
			if l := slices.IndexFunc(lits, func(l string) bool { return x != "" && strings.Contains(l, x) }); l >= 0 {
				bad("Exclude %q occurs in Contains %q: the rule can never match", x, lits[l])
			}
		}
		c := compiled{Rule: r}
		if r.Pattern != "" {
			re, err := regexp.Compile(r.Pattern)
			if err != nil {
				bad("invalid Pattern: %v", err)
			} else {
				c.re = re
				c.named = slices.ContainsFunc(re.SubexpNames(), func(n string) bool { return n != "" })
			}
		}
		if c.re != nil || r.Pattern == "" {
			expand(r.Message, func(name string) string {
				if c.re == nil || c.re.SubexpIndex(name) < 0 {
					bad("Message refers to ${%s}, which Pattern does not define as a named group", name)
				}
				return ""
			})
		}
		if len(lits) == 0 || (r.Pattern != "" && c.re == nil) {
			continue
		}
		slices.SortStableFunc(lits, func(a, b string) int { return len(b) - len(a) })
		c.anchor, c.rest = lits[0], lits[1:]
		m.rules = append(m.rules, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	anchors := make([]string, len(m.rules))
	for i, r := range m.rules {
		anchors[i] = r.anchor
	}
	m.pre = newPrefilter(anchors)
	return m, nil
}

// Match calls fn for every rule that matches line, in rule order.
func (m *Matcher) Match(line logline.Line, fn func(logline.Match)) { m.MatchOrReject(line, fn, nil) }

// MatchOrReject is Match, and calls rejected (when not nil) with the reason
// of every rule whose text the line matches but whose Accept does not
// believe the line's writer: a forged line, or a daemon logging under
// another's name. Such a line is never passed to fn.
func (m *Matcher) MatchOrReject(line logline.Line, fn func(logline.Match), rejected func(reason string)) {
	// One bit per rule whose anchor occurs in the line.
	var small [4]uint64
	hits := small[:]
	if n := (len(m.rules) + 63) / 64; n > len(small) {
		hits = make([]uint64, n)
	}
	if !m.pre.scan(line.Text, hits) {
		return
	}
	for w, word := range hits {
		for ; word != 0; word &= word - 1 {
			m.rules[w*64+bits.TrailingZeros64(word)].match(&line, fn, rejected)
		}
	}
}

// match calls fn if r matches line, given that r's anchor occurs in it, or
// rejected if its text matches but r does not believe its writer. The
// provenance is judged last: only a line whose text matches is counted as
// rejected.
func (r *compiled) match(line *logline.Line, fn func(logline.Match), rejected func(string)) {
	if !r.reads(line.Source) || !containsAll(line.Text, r.rest) || containsAny(line.Text, r.Exclude) {
		return
	}
	var groups map[string]string
	switch {
	case r.re == nil:
	case !r.named:
		if !r.re.MatchString(line.Text) {
			return
		}
	default:
		sub := r.re.FindStringSubmatch(line.Text)
		if sub == nil {
			return
		}
		groups = groupsOf(r.re, sub)
	}
	if !r.believes(line) {
		if rejected != nil {
			rejected(r.Reason)
		}
		return
	}
	fn(logline.Match{Reason: r.Reason, Line: *line, Groups: groups, Message: r.message(line.Text, groups)})
}

func (r *compiled) reads(src logline.Source) bool {
	return len(r.Sources) == 0 || slices.Contains(r.Sources, src)
}

func (r *compiled) believes(line *logline.Line) bool {
	for _, p := range r.Accept {
		if p.Accepts(line) {
			return true
		}
	}
	return false
}

func (r *compiled) message(text string, groups map[string]string) string {
	if r.Message == "" {
		return text
	}
	return expand(r.Message, func(name string) string { return groups[name] })
}

// expand replaces each ${name} in tmpl with value(name). A "${" without a
// closing "}" is kept as is.
func expand(tmpl string, value func(name string) string) string {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		b.WriteString(value(tmpl[i+2 : i+j]))
		tmpl = tmpl[i+j+1:]
	}
}

func groupsOf(re *regexp.Regexp, sub []string) map[string]string {
	var g map[string]string
	for i, name := range re.SubexpNames() {
		if name == "" || i >= len(sub) {
			continue
		}
		if g == nil {
			g = map[string]string{}
		}
		g[name] = sub[i]
	}
	return g
}

func containsAll(s string, lits []string) bool {
	for _, l := range lits {
		if !strings.Contains(s, l) {
			return false
		}
	}
	return true
}

func containsAny(s string, lits []string) bool {
	for _, l := range lits {
		if l != "" && strings.Contains(s, l) {
			return true
		}
	}
	return false
}
