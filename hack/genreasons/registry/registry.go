// Package registry reads reasons.yaml, validates it, and renders the generated
// Go table, the reasons documentation page and the compatibility lock. It is
// used by hack/genreasons and by the tests that keep those files honest.
package registry

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/health"
)

// File is the parsed reasons.yaml.
type File struct {
	Monitors []Monitor `json:"monitors"`
	Reasons  []Reason  `json:"reasons"`
	Families []Family  `json:"families,omitempty"`
}

// Monitor is one entry of the monitors list.
type Monitor struct {
	Name          string `json:"name"`
	Condition     string `json:"condition"`
	HealthyReason string `json:"healthyReason"`
}

// Reason is one entry of the reasons list.
type Reason struct {
	Name        string     `json:"name"`
	Condition   string     `json:"condition"`
	Severity    string     `json:"severity"`
	Source      string     `json:"source"`
	QuietPeriod string     `json:"quietPeriod,omitempty"`
	Threshold   *Threshold `json:"threshold,omitempty"`
	// Remedy is the lightest host action the vendor's catalogue says
	// resolves the fault (health.Remedies); RemedySource cites where the
	// catalogue says so. Fatal reasons only.
	Remedy       string `json:"remedy,omitempty"`
	RemedySource string `json:"remedySource,omitempty"`
	Description  string `json:"description"`
	Detects      string `json:"detects"`
}

// Family is a name that stands for a set of reasons wherever a reason is
// named (agent config overrides, NodeRepairPolicy rules), the way the EKS Node
// Monitoring Agent names its templated reasons: NvidiaXIDError means every
// NvidiaXID<N>Error.
type Family struct {
	Name string `json:"name"`
	// Template is the member names with %d standing for a decimal number,
	// e.g. NvidiaXID%dError. A reason called like the family itself is a
	// member too (the catch-all NvidiaXIDWarning).
	Template string `json:"template"`
	// Severity, when set, keeps only the members of that registry severity
	// (DCGMHealthCodeFatal: the DCGMHealthCode<N> that can be Fatal).
	Severity    string `json:"severity,omitempty"`
	Description string `json:"description"`
}

// Members returns the reasons of f that fam stands for, in registry order.
func (f *File) Members(fam Family) []Reason { return f.members(fam) }

// MatchesTemplate reports whether name is template with its %d replaced by
// one or more decimal digits.
func MatchesTemplate(template, name string) bool { return matchesTemplate(template, name) }

// members returns the reasons of f that belong to fam, in registry order.
func (f *File) members(fam Family) []Reason {
	var out []Reason
	for _, r := range f.Reasons {
		if fam.Severity != "" && r.Severity != fam.Severity {
			continue
		}
		if r.Name == fam.Name || matchesTemplate(fam.Template, r.Name) {
			out = append(out, r)
		}
	}
	return out
}

// matchesTemplate reports whether name is template with its %d replaced by
// one or more decimal digits.
func matchesTemplate(template, name string) bool {
	prefix, suffix, ok := strings.Cut(template, "%d")
	if !ok || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) <= len(prefix)+len(suffix) {
		return false
	}
	for _, c := range name[len(prefix) : len(name)-len(suffix)] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Threshold is a reason's default threshold.
type Threshold struct {
	Default float64 `json:"default"`
	Unit    string  `json:"unit"`
}

// Parse strictly decodes and validates a registry file.
func Parse(data []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("reasons.yaml: %w", err)
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("reasons.yaml: %w", err)
	}
	return &f, nil
}

func (f *File) validate() error {
	var errs []error
	owned := func(c string) bool { return health.IsOwned(c) }
	seenMonitor := map[string]bool{}
	for _, m := range f.Monitors {
		if m.Name == "" || seenMonitor[m.Name] {
			errs = append(errs, fmt.Errorf("monitor %q: empty or duplicate name", m.Name))
		}
		seenMonitor[m.Name] = true
		if !owned(m.Condition) {
			errs = append(errs, fmt.Errorf("monitor %q: unknown condition %q", m.Name, m.Condition))
		}
		if m.HealthyReason == "" {
			errs = append(errs, fmt.Errorf("monitor %q: healthyReason is required", m.Name))
		}
	}
	seen := map[string]bool{}
	for _, r := range f.Reasons {
		where := fmt.Sprintf("reason %q", r.Name)
		if r.Name == "" || !isIdentifier(r.Name) {
			errs = append(errs, fmt.Errorf("%s: name must be a non-empty CamelCase identifier", where))
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate", where))
		}
		seen[r.Name] = true
		if !owned(r.Condition) {
			errs = append(errs, fmt.Errorf("%s: unknown condition %q", where, r.Condition))
		}
		sev := health.Severity(r.Severity)
		if !sev.Valid() {
			errs = append(errs, fmt.Errorf("%s: severity %q is not Fatal, Warning or Info", where, r.Severity))
		}
		switch health.Source(r.Source) {
		case health.FromLog:
			if sev == health.Fatal {
				if _, err := r.quietPeriod(); err != nil || r.QuietPeriod == "" {
					errs = append(errs, fmt.Errorf("%s: a Fatal log-derived reason needs a quietPeriod (e.g. 45m)", where))
				}
			} else if r.QuietPeriod != "" {
				errs = append(errs, fmt.Errorf("%s: quietPeriod only applies to Fatal log-derived reasons", where))
			}
		case health.FromCheck:
			if r.QuietPeriod != "" {
				errs = append(errs, fmt.Errorf("%s: a check-derived reason recovers when its check passes; drop quietPeriod", where))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: source %q is not log or check", where, r.Source))
		}
		if strings.TrimSpace(r.Description) == "" || strings.TrimSpace(r.Detects) == "" {
			errs = append(errs, fmt.Errorf("%s: description and detects are required", where))
		}
		if r.Threshold != nil && r.Threshold.Unit == "" {
			errs = append(errs, fmt.Errorf("%s: threshold needs a unit", where))
		}
		switch {
		case r.Remedy == "" && r.RemedySource != "":
			errs = append(errs, fmt.Errorf("%s: remedySource without a remedy", where))
		case r.Remedy == "":
		case !health.Remedy(r.Remedy).Valid():
			errs = append(errs, fmt.Errorf("%s: remedy %q is not one of %v", where, r.Remedy, health.Remedies()))
		case sev != health.Fatal:
			errs = append(errs, fmt.Errorf("%s: only a Fatal reason has a remedy (nothing is repaired for a %s)", where, r.Severity))
		case strings.TrimSpace(r.RemedySource) == "":
			errs = append(errs, fmt.Errorf("%s: remedy %s needs its remedySource: the vendor catalogue that says so", where, r.Remedy))
		}
	}
	errs = append(errs, f.validateFamilies(seen)...)
	return errors.Join(errs...)
}

// validateFamilies checks that each family has a well-formed template,
// members, all of one condition, and no name that clashes with a reason
// outside it.
func (f *File) validateFamilies(reasons map[string]bool) []error {
	var errs []error
	seen := map[string]bool{}
	for _, fam := range f.Families {
		where := fmt.Sprintf("family %q", fam.Name)
		if !isIdentifier(fam.Name) || seen[fam.Name] {
			errs = append(errs, fmt.Errorf("%s: empty, duplicate or not a CamelCase identifier", where))
		}
		seen[fam.Name] = true
		if strings.Count(fam.Template, "%d") != 1 {
			errs = append(errs, fmt.Errorf("%s: template %q must contain %%d exactly once", where, fam.Template))
			continue
		}
		if strings.TrimSpace(fam.Description) == "" {
			errs = append(errs, fmt.Errorf("%s: description is required", where))
		}
		if fam.Severity != "" && !health.Severity(fam.Severity).Valid() {
			errs = append(errs, fmt.Errorf("%s: severity %q is not Fatal, Warning or Info", where, fam.Severity))
		}
		ms := f.members(fam)
		if len(ms) == 0 {
			errs = append(errs, fmt.Errorf("%s: no reason matches %s", where, fam.Template))
		}
		for _, m := range ms {
			if m.Condition != ms[0].Condition {
				errs = append(errs, fmt.Errorf("%s: members %s and %s have different conditions", where, ms[0].Name, m.Name))
			}
		}
	}
	return errs
}

func (r Reason) quietPeriod() (time.Duration, error) {
	if r.QuietPeriod == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(r.QuietPeriod)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	return d, err
}

func isIdentifier(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'A' && c <= 'Z':
		case i > 0 && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9'):
		default:
			return false
		}
	}
	return true
}

// RenderGo renders the generated Go table for package health.
func (f *File) RenderGo() ([]byte, error) {
	type goReason struct {
		Reason
		Quiet time.Duration
	}
	var rs []goReason
	for _, r := range f.Reasons {
		q, _ := r.quietPeriod()
		rs = append(rs, goReason{Reason: r, Quiet: q})
	}
	type goFamily struct {
		Family
		Condition string
		Members   []string
	}
	var fams []goFamily
	for _, fam := range f.Families {
		ms := f.members(fam)
		g := goFamily{Family: fam}
		for _, m := range ms {
			g.Condition = m.Condition
			g.Members = append(g.Members, m.Name)
		}
		fams = append(fams, g)
	}
	var buf bytes.Buffer
	if err := goTemplate.Execute(&buf, map[string]any{"Monitors": f.Monitors, "Reasons": rs, "Families": fams}); err != nil {
		return nil, err
	}
	out, err := format.Source(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting generated Go: %w\n%s", err, buf.Bytes())
	}
	return out, nil
}

var goTemplate = template.Must(template.New("go").Funcs(template.FuncMap{
	"q":  func(s string) string { return fmt.Sprintf("%q", strings.TrimSpace(s)) },
	"ns": func(d time.Duration) string { return fmt.Sprintf("%d", int64(d)) },
}).Parse(`// Code generated by hack/genreasons from reasons.yaml. DO NOT EDIT.

package health

import "time"

// Reason codes. Each is a stable public string; see reasons.yaml.
const (
{{- range .Reasons}}
	// Reason{{.Name}}: {{.Description | printf "%s"}}
	Reason{{.Name}} = {{q .Name}}
{{- end}}
)

// Healthy reasons, written while a condition is True.
const (
{{- range .Monitors}}
	Healthy{{.HealthyReason}} = {{q .HealthyReason}}
{{- end}}
)

var _ = time.Duration(0)

func monitors() []Monitor {
	return []Monitor{
{{- range .Monitors}}
		{Name: {{q .Name}}, Condition: {{q .Condition}}, HealthyReason: {{q .HealthyReason}}},
{{- end}}
	}
}

func reasons() []Reason {
	return []Reason{
{{- range .Reasons}}
		{
			Name: {{q .Name}}, Condition: {{q .Condition}}, Severity: {{q .Severity}}, Source: {{q .Source}},
{{- if .Quiet}}
			QuietPeriod: time.Duration({{ns .Quiet}}),
{{- end}}
{{- if .Threshold}}
			Threshold: &Threshold{Default: {{.Threshold.Default}}, Unit: {{q .Threshold.Unit}}},
{{- end}}
{{- if .Remedy}}
			Remedy: {{q .Remedy}}, RemedySource: {{q .RemedySource}},
{{- end}}
			Description: {{q .Description}},
			Detects: {{q .Detects}},
		},
{{- end}}
	}
}

func families() []Family {
	return []Family{
{{- range .Families}}
		{
			Name: {{q .Name}}, Condition: {{q .Condition}}, Template: {{q .Template}},
			Description: {{q .Description}},
			Members: []string{ {{- range $i, $m := .Members}}{{if $i}}, {{end}}{{q $m}}{{end -}} },
		},
{{- end}}
	}
}
`))

// RenderDocs renders docs/reasons.md.
func (f *File) RenderDocs() []byte {
	var b strings.Builder
	b.WriteString("<!-- Code generated by hack/genreasons from pkg/health/reasons.yaml. DO NOT EDIT. -->\n\n")
	b.WriteString("# Reason codes\n\n")
	b.WriteString("Every reason nodemend reports, by condition. **Fatal** reasons turn the condition `False` ")
	b.WriteString("(the node becomes repairable); **Warning** and **Info** reasons are Kubernetes Events on the Node and ")
	b.WriteString("leave the condition `True`. A fault is Fatal when it persists whatever pods run and does not clear by ")
	b.WriteString("itself; one that workloads can cause, or that clears by itself, is a Warning. ")
	b.WriteString("Reason strings are a stable public API: see `pkg/health/reasons.lock`. ")
	b.WriteString("A remedy is the lightest host action the vendor's catalogue says resolves the fault, with its source; ")
	b.WriteString("the default repair ladder starts there (docs/accelerators.md, \"Remedy per reason\").\n\n")
	for _, m := range f.Monitors {
		var rows []Reason
		for _, r := range f.Reasons {
			if r.Condition == m.Condition {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\nHealthy reason: `%s` (monitor `%s`).\n\n", m.Condition, m.HealthyReason, m.Name)
		b.WriteString("| reason | severity | detects | recovers | remedy | description |\n|---|---|---|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", r.Name, r.Severity, cell(r.Detects), cell(recoveryText(r)), remedyCell(r), cell(r.Description))
		}
		b.WriteString("\n")
	}
	if len(f.Families) > 0 {
		b.WriteString("## Reason families\n\n")
		b.WriteString("A family name stands for all its members wherever a reason is named: in the agent config's ")
		b.WriteString("`reasons` overrides (docs/agent-config.md) and in a NodeRepairPolicy rule's `reasons` (docs/repair.md). ")
		b.WriteString("An override of a member takes precedence over its family's.\n\n")
		b.WriteString("| family | members | description |\n|---|---|---|\n")
		for _, fam := range f.Families {
			var names []string
			for _, m := range f.members(fam) {
				names = append(names, "`"+m.Name+"`")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", fam.Name, strings.Join(names, ", "), cell(fam.Description))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

func recoveryText(r Reason) string {
	thr := ""
	if r.Threshold != nil {
		thr = fmt.Sprintf(" Default threshold: %v %s.", r.Threshold.Default, r.Threshold.Unit)
	}
	switch {
	case health.Severity(r.Severity) != health.Fatal:
		return "Event only; the condition is not changed." + thr
	case health.Source(r.Source) == health.FromCheck:
		return "When the check passes again." + thr
	default:
		return fmt.Sprintf("After %s without a new detection.%s", r.QuietPeriod, thr)
	}
}

func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// LockEntry is one line of reasons.lock.
type LockEntry struct {
	Reason, Condition, Severity string
}

// RenderLock renders the lock for the current registry, sorted by reason.
func (f *File) RenderLock() []byte {
	var b strings.Builder
	b.WriteString("# nodemend reason compatibility lock: reason condition severity.\n")
	b.WriteString("# Released reasons may not be renamed, removed or change condition or severity.\n")
	b.WriteString("# Update only on purpose (make update-reason-lock) with a CHANGELOG entry.\n")
	entries := f.lockEntries()
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s %s\n", e.Reason, e.Condition, e.Severity)
	}
	return []byte(b.String())
}

func (f *File) lockEntries() []LockEntry {
	var es []LockEntry
	for _, r := range f.Reasons {
		es = append(es, LockEntry{r.Name, r.Condition, r.Severity})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Reason < es[j].Reason })
	return es
}

// ParseLock reads a reasons.lock file.
func ParseLock(data []byte) ([]LockEntry, error) {
	var es []LockEntry
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			return nil, fmt.Errorf("reasons.lock line %d: want 'reason condition severity', got %q", i+1, line)
		}
		es = append(es, LockEntry{fs[0], fs[1], fs[2]})
	}
	return es, nil
}

// CheckCompatible returns an error naming every locked reason that the registry
// removed, renamed (a removal plus an addition) or moved to another condition
// or severity. Reasons added since the lock pass.
func (f *File) CheckCompatible(lock []LockEntry) error {
	current := map[string]LockEntry{}
	for _, e := range f.lockEntries() {
		current[e.Reason] = e
	}
	var errs []error
	for _, old := range lock {
		now, ok := current[old.Reason]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("released reason %s (%s, %s) was removed or renamed", old.Reason, old.Condition, old.Severity))
		case now.Condition != old.Condition:
			errs = append(errs, fmt.Errorf("released reason %s moved from %s to %s", old.Reason, old.Condition, now.Condition))
		case now.Severity != old.Severity:
			errs = append(errs, fmt.Errorf("released reason %s changed severity from %s to %s", old.Reason, old.Severity, now.Severity))
		}
	}
	if len(errs) > 0 {
		errs = append(errs, errors.New("if this is intended, run `make update-reason-lock` and add a CHANGELOG entry"))
	}
	return errors.Join(errs...)
}

// Names returns the reason names in registry order.
func (f *File) Names() []string {
	var ns []string
	for _, r := range f.Reasons {
		ns = append(ns, r.Name)
	}
	return slices.Clip(ns)
}

// Generated sections of docs/accelerators.md: the text between a BEGIN and
// an END marker is replaced, the rest of the page is written by hand.
const (
	beginMarker = "<!-- BEGIN GENERATED %s: hack/genreasons from pkg/health/reasons.yaml; do not edit -->\n"
	endMarker   = "<!-- END GENERATED %s -->"
)

// RenderAccelerators returns page (docs/accelerators.md) with its generated
// sections rendered from the registry: "xid", the NVIDIA XID table, and
// "remedies", the remedy of every Fatal accelerator reason with the vendor
// source that names it. Each section must be present exactly once.
func (f *File) RenderAccelerators(page []byte) ([]byte, error) {
	out := string(page)
	for _, s := range []struct {
		name string
		body string
	}{{"xid", f.xidTable()}, {"remedies", f.remedyTable()}} {
		begin, end := fmt.Sprintf(beginMarker, s.name), fmt.Sprintf(endMarker, s.name)
		i, j := strings.Index(out, begin), strings.Index(out, end)
		if i < 0 || j < i || strings.Count(out, begin) != 1 {
			return nil, fmt.Errorf("docs/accelerators.md: want one %q ... %q section", strings.TrimSpace(begin), end)
		}
		out = out[:i+len(begin)] + s.body + out[j:]
	}
	return []byte(out), nil
}

// DefaultLadderText is the ladder the controller gives a node no engine
// owns for a Fatal fault with remedy rm and no policy ladder, as
// docs/accelerators.md shows it (pkg/repair/ladder.Resolve; a test there
// holds the docs to it).
func DefaultLadderText(rm health.Remedy) string {
	switch rm {
	case health.RemedyResetGPU:
		return "ResetAccelerator → Reboot → Quarantine"
	case health.RemedyReplaceHardware:
		return "Quarantine"
	}
	return "Reboot → Quarantine"
}

// xidNumber is the XID of an NvidiaXID<N>Error/Warning reason, 0 otherwise.
func xidNumber(name string) int {
	for _, t := range []string{"NvidiaXID%dError", "NvidiaXID%dWarning"} {
		if matchesTemplate(t, name) {
			var n int
			fmt.Sscanf(strings.TrimPrefix(name, "NvidiaXID"), "%d", &n)
			return n
		}
	}
	return 0
}

func (f *File) xidTable() string {
	var b strings.Builder
	b.WriteString("| XID | what | severity | reason | why | vendor remedy | default ladder (no engine) |\n|---|---|---|---|---|---|---|\n")
	type row struct {
		n int
		r Reason
	}
	var rows []row
	for _, r := range f.Reasons {
		if n := xidNumber(r.Name); n > 0 {
			rows = append(rows, row{n, r})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].n < rows[j].n })
	for _, x := range rows {
		desc := strings.Join(strings.Fields(x.r.Description), " ")
		what, why := "", desc
		if rest, ok := strings.CutPrefix(desc, fmt.Sprintf("XID %d, ", x.n)); ok {
			what, why, _ = strings.Cut(rest, ". ")
		}
		remedy, ladder := "—", "— (an Event)"
		if x.r.Severity == string(health.Fatal) {
			remedy, ladder = remedyCell(x.r), DefaultLadderText(health.Remedy(x.r.Remedy))
		}
		fmt.Fprintf(&b, "| %d | %s | **%s** | `%s` | %s | %s | %s |\n", x.n, cell(what), x.r.Severity, x.r.Name, cell(why), remedy, ladder)
	}
	return b.String()
}

func (f *File) remedyTable() string {
	var b strings.Builder
	b.WriteString("| reason | severity | remedy | the vendor's guidance | default ladder (no engine) |\n|---|---|---|---|---|\n")
	for _, r := range f.Reasons {
		if r.Condition != string(health.AcceleratedHardwareReady) || r.Severity != string(health.Fatal) {
			continue
		}
		rm, src := "—", "no vendor catalogue names a host action for it"
		if r.Remedy != "" {
			rm, src = "`"+r.Remedy+"`", cell(r.RemedySource)
		}
		fmt.Fprintf(&b, "| `%s` | **%s** | %s | %s | %s |\n", r.Name, r.Severity, rm, src, DefaultLadderText(health.Remedy(r.Remedy)))
	}
	return b.String()
}

func remedyCell(r Reason) string {
	if r.Remedy == "" {
		return "—"
	}
	return "`" + r.Remedy + "`: " + cell(r.RemedySource)
}
