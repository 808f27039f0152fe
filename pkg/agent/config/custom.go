package config

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// CustomPrefix starts every reason an operator defines (custom rules and
// checks, promoted reasons). The registry never uses it (a test in
// pkg/health holds it to that), so an operator's reason never collides
// with a reason a later nodemend release adds, and anything reading a
// reason (a repair policy, kubectl mend) tells an operator's reason from
// an unknown one by its name.
const CustomPrefix = health.CustomReasonPrefix

// Bounds on what an operator defines: each custom reason is a label value
// of the agent's metrics and an Event reason, so their number is capped;
// each rule is matched against every log line, so its literals and pattern
// are bounded (RE2 patterns run in linear time, but a large one costs
// memory and time on every line its literals let through).
const (
	// MaxCustomReasons caps the reasons custom rules, custom checks and
	// promotions define together.
	MaxCustomReasons = 128
	// MaxCustomLiterals caps the contains and exclude literals of a rule.
	MaxCustomLiterals = 8
	// MaxLiteralBytes caps one literal.
	MaxLiteralBytes = 256
	// MaxPatternBytes caps a rule's pattern.
	MaxPatternBytes = 1024
	// MaxPatternInsts caps the size of a compiled pattern (RE2
	// instructions): about 20 times a plain 1 KiB pattern's.
	MaxPatternInsts = 20_000
	// MaxMessageBytes caps a message template or a description.
	MaxMessageBytes = health.MaxMessageLength
	// MaxPromotionCount caps a promotion's count: the agent keeps the
	// times of the last count occurrences.
	MaxPromotionCount = 1000
	// MaxPromotionWindow caps a promotion's window: occurrences are
	// restored after a restart from what the kernel log and the journal
	// still hold, which is bounded.
	MaxPromotionWindow = 24 * time.Hour
	// DefaultCustomQuietPeriod is the quiet period of a Fatal custom log
	// rule or promotion that states none: the registry's usual one, longer
	// than the 30-minute default toleration.
	DefaultCustomQuietPeriod = 45 * time.Minute
	// MinCustomCheckPeriod and MaxCustomCheckTimeout bound custom checks.
	MinCustomCheckPeriod  = 10 * time.Second
	MaxCustomCheckTimeout = 5 * time.Minute
	// DefaultCustomCheckTimeout is the timeout of a check that states none
	// (node-problem-detector's plugin default).
	DefaultCustomCheckTimeout = 5 * time.Second
)

// CustomRule is an operator's log rule (docs/agent-config.md, custom
// rules): lines of one source, believed only from the writers Accept
// names, that match Contains (all literals), then Pattern, report Reason.
type CustomRule struct {
	// Reason is the reason reported: CustomPrefix, then UpperCamelCase.
	Reason string `json:"reason"`
	// Condition is one of the five condition types.
	Condition string `json:"condition"`
	// Severity: Fatal (the condition goes False), Warning or Info (an Event).
	Severity string `json:"severity"`
	// Description says what the fault is, for kubectl mend explain.
	Description string `json:"description,omitempty"`
	// Source is kmsg, journal (with Unit) or file (with File).
	Source string `json:"source"`
	// Unit is the systemd unit whose journal entries the rule reads.
	Unit string `json:"unit,omitempty"`
	// File is the absolute path, on the host, of a file the rule reads.
	File string `json:"file,omitempty"`
	// Accept names the writers the rule believes (logline.Provenance):
	// kernel; unit:NAME, systemd or root for the journal; file:PATH or file.
	Accept []logline.Provenance `json:"accept"`
	// Contains are literals that must all occur: the cheap prefilter.
	Contains []string `json:"contains"`
	// Pattern is an RE2 expression tried after the prefilter; its named
	// groups fill ${name} in Message.
	Pattern string `json:"pattern,omitempty"`
	// Exclude are literals that veto a match.
	Exclude []string `json:"exclude,omitempty"`
	// Message is the finding's message; empty is the line itself.
	Message string `json:"message,omitempty"`
	// QuietPeriod is how long a Fatal rule's fault lasts after its last
	// line (default 45m, at least 1m).
	QuietPeriod *detection.Duration `json:"quietPeriod,omitempty"`
	// Promote turns a Warning into a Fatal reason when it repeats.
	Promote *Promotion `json:"promote,omitempty"`
}

// CustomCheck is an operator's check: a program on the host, run on a
// period, with node-problem-detector's plugin protocol (exit 0 OK, 1 a
// problem, anything else unknown; the first line of its output is the
// message).
type CustomCheck struct {
	// Reason is the reason reported: CustomPrefix, then UpperCamelCase.
	Reason string `json:"reason"`
	// Condition is one of the five condition types.
	Condition string `json:"condition"`
	// Severity: Fatal (the condition is False while the check finds the
	// problem), Warning or Info (an Event).
	Severity string `json:"severity"`
	// Description says what the fault is, for kubectl mend explain.
	Description string `json:"description,omitempty"`
	// Command is the program (an absolute path on the host, or a name
	// found in the host's standard PATH) and its arguments.
	Command []string `json:"command"`
	// Period is how often it runs (at least 10s), with the scheduler's
	// jitter.
	Period detection.Duration `json:"period"`
	// Timeout bounds a run (default 5s, shorter than Period); a run that
	// does not finish in time leaves the state as it was.
	Timeout *detection.Duration `json:"timeout,omitempty"`
	// Promote turns a Warning into a Fatal reason when it repeats.
	Promote *Promotion `json:"promote,omitempty"`
}

// Promotion is "count times within a window": a Warning reason that
// repeats that often becomes Reason, Fatal, on the Warning's condition.
type Promotion struct {
	// Count occurrences (2 to 1000) ...
	Count int `json:"count"`
	// ... Within this long (at most 24h) promote the reason. A log line is
	// one occurrence, a check's run that finds it another.
	Within detection.Duration `json:"within"`
	// To is the promoted severity: Fatal (the default; the only one).
	To string `json:"to,omitempty"`
	// Reason is the promoted reason: CustomPrefix, then UpperCamelCase.
	Reason string `json:"reason"`
	// QuietPeriod is how long the promoted fault lasts after the
	// occurrence that last kept the count reached (default 45m, at least
	// 1m): the promoted reason recovers like a log-derived one.
	QuietPeriod *detection.Duration `json:"quietPeriod,omitempty"`
	// Description says what the promoted fault is.
	Description string `json:"description,omitempty"`
}

// Custom sources.
const (
	SourceKmsg    = "kmsg"
	SourceJournal = "journal"
	SourceFile    = "file"
)

// customReason is a custom reason as the exporter and the monitors see it.
func customReason(name, condition, severity, description string, source health.Source, quiet *detection.Duration) health.Reason {
	r := health.Reason{Name: name, Condition: health.ConditionType(condition), Severity: health.Severity(severity),
		Source: source, Description: description}
	if r.Severity == health.Fatal && source == health.FromLog {
		r.QuietPeriod = DefaultCustomQuietPeriod
		if quiet != nil {
			r.QuietPeriod = quiet.Duration
		}
	}
	return r
}

// CustomReasons is every reason the config defines, by name.
func (c Config) CustomReasons() map[string]health.Reason {
	out := map[string]health.Reason{}
	for _, r := range c.CustomRules {
		out[r.Reason] = customReason(r.Reason, r.Condition, r.Severity, r.Description, health.FromLog, r.QuietPeriod)
	}
	for _, k := range c.CustomChecks {
		out[k.Reason] = customReason(k.Reason, k.Condition, k.Severity, k.Description, health.FromCheck, nil)
	}
	for base, p := range c.Promotions() {
		b, ok := c.lookup(base)
		if !ok {
			continue
		}
		out[p.Reason] = customReason(p.Reason, string(b.Condition), string(health.Fatal), p.Description, health.FromLog, p.QuietPeriod)
	}
	return out
}

// Promotions maps each reason that is promoted when it repeats to its
// promotion: registry reasons (reasons.NAME.promote) and custom ones.
func (c Config) Promotions() map[string]Promotion {
	out := map[string]Promotion{}
	for name, rc := range c.Reasons {
		if rc.Promote != nil {
			out[name] = *rc.Promote
		}
	}
	for _, r := range c.CustomRules {
		if r.Promote != nil {
			out[r.Reason] = *r.Promote
		}
	}
	for _, k := range c.CustomChecks {
		if k.Promote != nil {
			out[k.Reason] = *k.Promote
		}
	}
	return out
}

// lookup finds a reason in the registry or among the custom rules and
// checks (not the promoted reasons).
func (c Config) lookup(name string) (health.Reason, bool) {
	if r, ok := health.LookupReason(name); ok {
		return r, true
	}
	for _, r := range c.CustomRules {
		if r.Reason == name {
			return customReason(r.Reason, r.Condition, r.Severity, r.Description, health.FromLog, r.QuietPeriod), true
		}
	}
	for _, k := range c.CustomChecks {
		if k.Reason == name {
			return customReason(k.Reason, k.Condition, k.Severity, k.Description, health.FromCheck, nil), true
		}
	}
	return health.Reason{}, false
}

// LogRule is r as the rule matcher takes it.
func (r CustomRule) LogRule() logline.Rule {
	lr := logline.Rule{Reason: r.Reason, Accept: r.Accept, Contains: r.Contains, Pattern: r.Pattern, Exclude: r.Exclude, Message: r.Message}
	switch r.Source {
	case SourceKmsg:
		lr.Sources = []logline.Source{logline.Kmsg}
	case SourceJournal:
		lr.Sources = []logline.Source{logline.Journal}
	case SourceFile:
		lr.Sources = []logline.Source{logline.File}
	}
	return lr
}

// LogFiles are the host files the custom rules read, each once.
func (c Config) LogFiles() []string {
	var out []string
	for _, r := range c.CustomRules {
		if r.Source == SourceFile && !slices.Contains(out, r.File) {
			out = append(out, r.File)
		}
	}
	return out
}

// validateCustom checks the custom rules, checks and promotions: every
// problem named by the rule and field (customRules[3] (CustomFoo).pattern).
func (c Config) validateCustom() []error {
	var errs []error
	seen := map[string]string{} // reason → where it was defined
	claim := func(where, name string) {
		if err := validCustomName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			return
		}
		if prev, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("%s: reason %s is already defined by %s", where, name, prev))
			return
		}
		seen[name] = where
	}
	// custom validates what a rule and a check share, then the rest.
	custom := func(where, reason, condition, severity, description string, promote *Promotion, rest []error) {
		claim(where+".reason", reason)
		errs = append(errs, validateHead(where, condition, severity, description)...)
		errs = append(errs, rest...)
		if promote != nil {
			claim(where+".promote.reason", promote.Reason)
			errs = append(errs, promote.validate(where+".promote", severity)...)
		}
	}
	for i, r := range c.CustomRules {
		where := fmt.Sprintf("customRules[%d] (%s)", i, r.Reason)
		custom(where, r.Reason, r.Condition, r.Severity, r.Description, r.Promote, r.validate(where))
	}
	for i, k := range c.CustomChecks {
		where := fmt.Sprintf("customChecks[%d] (%s)", i, k.Reason)
		custom(where, k.Reason, k.Condition, k.Severity, k.Description, k.Promote, k.validate(where))
	}
	names := make([]string, 0, len(c.Reasons))
	for n := range c.Reasons {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := c.Reasons[n].Promote
		if p == nil {
			continue
		}
		where := "reasons." + n + ".promote"
		r, ok := health.LookupReason(n)
		if !ok {
			continue // validateReasonOverride names it
		}
		claim(where+".reason", p.Reason)
		errs = append(errs, p.validate(where, string(r.Severity))...)
	}
	if len(seen) > MaxCustomReasons {
		errs = append(errs, fmt.Errorf("customRules, customChecks and promotions define %d reasons, more than the %d allowed (each is a metric label and an Event reason)", len(seen), MaxCustomReasons))
	}
	return errs
}

// validCustomName checks an operator's reason name.
func validCustomName(name string) error {
	switch {
	case name == "":
		return errors.New("a reason is required")
	case !strings.HasPrefix(name, CustomPrefix) || len(name) == len(CustomPrefix):
		return fmt.Errorf("reason %q must start with %q and name the fault (CustomAcmeNICLinkReset): the prefix keeps it apart from every reason nodemend ships now or later", name, CustomPrefix)
	case !health.ValidReason(name):
		return fmt.Errorf("reason %q must be UpperCamelCase letters and digits, at most %d characters", name, health.MaxReasonLength)
	}
	if _, ok := health.LookupReason(name); ok {
		return fmt.Errorf("reason %q is a registry reason", name)
	}
	if _, ok := health.Expand(name); ok {
		return fmt.Errorf("reason %q is a registry family", name)
	}
	return nil
}

// validateHead checks what rules and checks share.
func validateHead(where, condition, severity, description string) []error {
	var errs []error
	if !health.IsOwned(condition) {
		errs = append(errs, fmt.Errorf("%s.condition: %q is not one of %v", where, condition, health.ConditionTypes()))
	}
	switch health.Severity(severity) {
	case health.Fatal, health.Warning, health.Info:
	default:
		errs = append(errs, fmt.Errorf("%s.severity: %q is not Fatal, Warning or Info", where, severity))
	}
	if len(description) > MaxMessageBytes {
		errs = append(errs, fmt.Errorf("%s.description: %d bytes, more than %d", where, len(description), MaxMessageBytes))
	}
	return errs
}

func (r CustomRule) validate(where string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...)))
	}
	switch r.Source {
	case SourceKmsg:
		if r.Unit != "" || r.File != "" {
			bad("source", "kmsg takes neither unit nor file")
		}
	case SourceJournal:
		if r.Unit == "" {
			bad("unit", "a journal rule names the unit whose entries it reads")
		} else if err := logline.ByUnit(r.Unit).Validate(); err != nil {
			bad("unit", "%v", err)
		}
		if r.File != "" {
			bad("file", "a journal rule takes no file")
		}
	case SourceFile:
		if r.File == "" || !path.IsAbs(r.File) || path.Clean(r.File) != r.File || r.File == "/" {
			bad("file", "%q must be an absolute, clean path of a file on the host", r.File)
		}
		if r.Unit != "" {
			bad("unit", "a file rule takes no unit")
		}
	default:
		bad("source", "%q is not kmsg, journal or file", r.Source)
	}
	if len(r.Accept) == 0 {
		bad("accept", "name the writers the rule believes (kernel; unit:NAME, systemd or root; file:PATH or file): a line anybody could write is no evidence")
	}
	for _, p := range r.Accept {
		if err := p.Validate(); err != nil {
			bad("accept", "%v", err)
			continue
		}
		if why := acceptFits(r, p); why != "" {
			bad("accept", "%s", why)
		}
	}
	lits := 0
	for _, l := range r.Contains {
		lits++
		if l == "" || len(l) > MaxLiteralBytes {
			bad("contains", "a literal has 1 to %d bytes", MaxLiteralBytes)
		}
	}
	if len(r.Contains) == 0 {
		bad("contains", "at least one literal is required: it is the prefilter that keeps every other line cheap")
	}
	for _, l := range r.Exclude {
		lits++
		if l == "" || len(l) > MaxLiteralBytes {
			bad("exclude", "a literal has 1 to %d bytes", MaxLiteralBytes)
		}
	}
	if lits > MaxCustomLiterals {
		bad("contains", "%d literals with exclude, more than %d", lits, MaxCustomLiterals)
	}
	if r.Pattern != "" {
		if err := validPattern(r.Pattern); err != nil {
			bad("pattern", "%v", err)
		} else {
			re := regexp.MustCompile(r.Pattern)
			expandNames(r.Message, func(name string) {
				if re.SubexpIndex(name) < 0 {
					bad("message", "${%s} is not a named group of the pattern", name)
				}
			})
		}
	} else {
		expandNames(r.Message, func(name string) { bad("message", "${%s}: there is no pattern to name groups", name) })
	}
	if len(r.Message) > MaxMessageBytes {
		bad("message", "%d bytes, more than %d", len(r.Message), MaxMessageBytes)
	}
	if r.QuietPeriod != nil {
		switch {
		case health.Severity(r.Severity) != health.Fatal:
			bad("quietPeriod", "only a Fatal rule's fault has a quiet period")
		case r.QuietPeriod.Duration < MinQuietPeriod:
			bad("quietPeriod", "%v is shorter than the %v floor", r.QuietPeriod.Duration, MinQuietPeriod)
		}
	}
	return errs
}

// acceptFits says why provenance p cannot be the writer of r's lines, or
// "" when it can.
func acceptFits(r CustomRule, p logline.Provenance) string {
	s := string(p)
	switch r.Source {
	case SourceKmsg:
		if p != logline.ByKernel {
			return fmt.Sprintf("%q: a kmsg rule believes the kernel only (kernel): a user-space write to /dev/kmsg is no evidence", s)
		}
	case SourceJournal:
		if p == logline.ByAnyFile || strings.HasPrefix(s, "file:") {
			return fmt.Sprintf("%q is a file's provenance, not the journal's", s)
		}
		if strings.HasPrefix(s, "unit:") && s != string(logline.ByUnit(r.Unit)) {
			return fmt.Sprintf("%q is another unit than the rule reads (%s)", s, r.Unit)
		}
	case SourceFile:
		if p != logline.ByAnyFile && s != string(logline.ByFile(r.File)) {
			return fmt.Sprintf("%q: a file rule believes its file (file:%s or file)", s, r.File)
		}
	}
	return ""
}

// validPattern compiles an RE2 pattern within the bounds.
func validPattern(p string) error {
	if len(p) > MaxPatternBytes {
		return fmt.Errorf("%d bytes, more than %d", len(p), MaxPatternBytes)
	}
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return err
	}
	if n := len(prog.Inst); n > MaxPatternInsts {
		return fmt.Errorf("compiles to %d instructions, more than %d: simplify its repetitions", n, MaxPatternInsts)
	}
	_, err = regexp.Compile(p)
	return err
}

// expandNames calls fn with every ${name} of a message template.
func expandNames(tmpl string, fn func(name string)) {
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			return
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return
		}
		fn(tmpl[i+2 : i+j])
		tmpl = tmpl[i+j+1:]
	}
}

func (k CustomCheck) validate(where string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...)))
	}
	if len(k.Command) == 0 || k.Command[0] == "" {
		bad("command", "the program to run is required")
	} else if p := k.Command[0]; strings.Contains(p, "/") && (!path.IsAbs(p) || path.Clean(p) != p) {
		bad("command", "%q must be an absolute, clean path on the host, or a name found in the host's PATH", p)
	}
	if len(k.Command) > 64 {
		bad("command", "%d arguments, more than 64", len(k.Command))
	}
	if k.Period.Duration < MinCustomCheckPeriod {
		bad("period", "%v is shorter than %v", k.Period.Duration, MinCustomCheckPeriod)
	}
	timeout := k.TimeoutOrDefault()
	switch {
	case timeout <= 0 || timeout > MaxCustomCheckTimeout:
		bad("timeout", "%v must be between 0 and %v", timeout, MaxCustomCheckTimeout)
	case timeout >= k.Period.Duration:
		bad("timeout", "%v must be shorter than the period %v", timeout, k.Period.Duration)
	}
	return errs
}

// TimeoutOrDefault is the check's timeout.
func (k CustomCheck) TimeoutOrDefault() time.Duration {
	if k.Timeout != nil {
		return k.Timeout.Duration
	}
	return DefaultCustomCheckTimeout
}

func (p Promotion) validate(where, baseSeverity string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", where, field, fmt.Sprintf(format, args...)))
	}
	if health.Severity(baseSeverity) != health.Warning {
		bad("reason", "only a Warning reason is promoted (this one is %s)", baseSeverity)
	}
	if p.Count < 2 || p.Count > MaxPromotionCount {
		bad("count", "%d must be between 2 and %d", p.Count, MaxPromotionCount)
	}
	if p.Within.Duration < time.Second || p.Within.Duration > MaxPromotionWindow {
		bad("within", "%v must be between 1s and %v", p.Within.Duration, MaxPromotionWindow)
	}
	if p.To != "" && health.Severity(p.To) != health.Fatal {
		bad("to", "%q: a promotion goes to Fatal", p.To)
	}
	if p.QuietPeriod != nil && p.QuietPeriod.Duration < MinQuietPeriod {
		bad("quietPeriod", "%v is shorter than the %v floor", p.QuietPeriod.Duration, MinQuietPeriod)
	}
	if len(p.Description) > MaxMessageBytes {
		bad("description", "%d bytes, more than %d", len(p.Description), MaxMessageBytes)
	}
	return errs
}
