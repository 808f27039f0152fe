package rules

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"nodemend.dev/nodemend/pkg/agent/logline"
)

// Matcher applies a compiled rule set to lines. It is safe for concurrent use.
type Matcher struct {
	rules []compiled
}

type compiled struct {
	Rule
	re *regexp.Regexp
	// anchor is the longest literal of Contains: the one most likely to be
	// absent, checked first.
	anchor string
	rest   []string
}

// Compile validates rules and prepares them for matching.
func Compile(rs []Rule) (*Matcher, error) {
	var errs []error
	m := &Matcher{}
	for i, r := range rs {
		where := fmt.Sprintf("rule %d (%s)", i, r.Reason)
		if r.Reason == "" {
			errs = append(errs, fmt.Errorf("%s: reason is required", where))
		}
		lits := slices.DeleteFunc(slices.Clone(r.Contains), func(s string) bool { return s == "" })
		if len(lits) == 0 {
			errs = append(errs, fmt.Errorf("%s: at least one non-empty Contains literal is required as a prefilter", where))
			continue
		}
		c := compiled{Rule: r}
		if r.Pattern != "" {
			re, err := regexp.Compile(r.Pattern)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			c.re = re
		}
		slices.SortStableFunc(lits, func(a, b string) int { return len(b) - len(a) })
		c.anchor, c.rest = lits[0], lits[1:]
		m.rules = append(m.rules, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// Match calls fn for every rule that matches line, in rule order.
func (m *Matcher) Match(line logline.Line, fn func(Match)) {
	for i := range m.rules {
		r := &m.rules[i]
		if !strings.Contains(line.Text, r.anchor) || !r.selects(line) {
			continue
		}
		if !containsAll(line.Text, r.rest) || containsAny(line.Text, r.Exclude) {
			continue
		}
		match := Match{Reason: r.Reason, Line: line}
		if r.re != nil {
			sub := r.re.FindStringSubmatch(line.Text)
			if sub == nil {
				continue
			}
			match.Groups = groups(r.re, sub)
		}
		match.Message = r.message(line.Text, match.Groups)
		fn(match)
	}
}

func (r *compiled) selects(line logline.Line) bool {
	if len(r.Sources) > 0 && !slices.Contains(r.Sources, line.Source) {
		return false
	}
	if len(r.Units) > 0 && line.Source != logline.Kmsg && !slices.Contains(r.Units, line.Unit) {
		return false
	}
	return true
}

func (r *compiled) message(text string, groups map[string]string) string {
	if r.Message == "" {
		return text
	}
	return expand(r.Message, groups)
}

// expand replaces ${name} with groups[name]; unknown names expand to "".
func expand(tmpl string, groups map[string]string) string {
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
		b.WriteString(groups[tmpl[i+2:i+j]])
		tmpl = tmpl[i+j+1:]
	}
}

func groups(re *regexp.Regexp, sub []string) map[string]string {
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
