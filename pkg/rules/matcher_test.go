package rules

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/logline"
)

// got is a match reduced to what the tests compare.
type got struct {
	Reason, Message string
	Groups          map[string]string
}

func matchAll(m *Matcher, line logline.Line) []got {
	g, _ := matchAndReject(m, line)
	return g
}

// matchAndReject returns the matches and the reasons of the rules that
// matched the text but refused the writer.
func matchAndReject(m *Matcher, line logline.Line) ([]got, []string) {
	var out []got
	var rejected []string
	m.MatchOrReject(line, func(mt logline.Match) {
		if mt.Line != line {
			panic(fmt.Sprintf("match carries line %+v, want %+v", mt.Line, line))
		}
		out = append(out, got{mt.Reason, mt.Message, mt.Groups})
	}, func(reason string) { rejected = append(rejected, reason) })
	return out, rejected
}

// everyone believes every writer a source can prove: rules of the tests
// that are not about provenance.
var everyone = []logline.Provenance{logline.ByKernel, logline.BySystemd, logline.ByRoot, logline.ByAnyFile}

// believes is the reference for logline.Provenance.Accepts, written from
// its documentation.
func believes(r logline.Rule, l logline.Line) bool {
	for _, p := range r.Accept {
		s := string(p)
		switch {
		case s == "kernel" && l.Origin.Kernel,
			s == "systemd" && l.Source == logline.Journal && l.Origin.Manager,
			s == "root" && l.Source == logline.Journal && l.Origin.Root,
			s == "file" && l.Source == logline.File,
			strings.HasPrefix(s, "unit:") && l.Source == logline.Journal && l.Unit == s[5:],
			strings.HasPrefix(s, "file:") && l.Source == logline.File && l.Unit == s[5:]:
			return true
		}
	}
	return false
}

// reference is the obvious implementation of the rule semantics, without the
// prefilter automaton: the matcher must agree with it on every line.
func reference(rs []logline.Rule, line logline.Line) []got {
	g, _ := referenceAndRejects(rs, line)
	return g
}

func referenceAndRejects(rs []logline.Rule, line logline.Line) ([]got, []string) {
	var out []got
	var rejected []string
	for _, r := range rs {
		if len(r.Sources) > 0 && !slices.Contains(r.Sources, line.Source) {
			continue
		}
		if !slices.ContainsFunc(r.Contains, func(l string) bool { return l != "" }) ||
			slices.ContainsFunc(r.Contains, func(l string) bool { return !strings.Contains(line.Text, l) }) ||
			slices.ContainsFunc(r.Exclude, func(l string) bool { return l != "" && strings.Contains(line.Text, l) }) {
			continue
		}
		g := got{Reason: r.Reason, Message: line.Text}
		if r.Pattern != "" {
			re := regexp.MustCompile(r.Pattern)
			sub := re.FindStringSubmatch(line.Text)
			if sub == nil {
				continue
			}
			for i, name := range re.SubexpNames() {
				if name != "" {
					if g.Groups == nil {
						g.Groups = map[string]string{}
					}
					g.Groups[name] = sub[i]
				}
			}
		}
		if r.Message != "" {
			g.Message = regexp.MustCompile(`\$\{[^}]*\}`).ReplaceAllStringFunc(r.Message, func(ref string) string {
				return g.Groups[ref[2:len(ref)-1]]
			})
		}
		if !believes(r, line) {
			rejected = append(rejected, r.Reason)
			continue
		}
		out = append(out, g)
	}
	return out, rejected
}

func TestCompileRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule logline.Rule
		want []string
	}{
		{"no reason", logline.Rule{Contains: []string{"x"}}, []string{"rule 0 (): reason is required"}},
		{"no contains", logline.Rule{Reason: "R"}, []string{"rule 0 (R): at least one non-empty Contains literal is required"}},
		{"only empty contains", logline.Rule{Reason: "R", Contains: []string{"", ""}}, []string{"at least one non-empty Contains literal"}},
		{"bad regex", logline.Rule{Reason: "R", Contains: []string{"x"}, Pattern: `x(`}, []string{"rule 0 (R): invalid Pattern: error parsing regexp: missing closing ): `x(`"}},
		{"unknown source", logline.Rule{Reason: "R", Contains: []string{"x"}, Sources: []logline.Source{"kmesg"}}, []string{`rule 0 (R): unknown source "kmesg"`}},
		{"message without group", logline.Rule{Reason: "R", Contains: []string{"x"}, Pattern: `(?P<a>x)`, Message: "${a} ${b}"}, []string{"rule 0 (R): Message refers to ${b}, which Pattern does not define"}},
		{"message without pattern", logline.Rule{Reason: "R", Contains: []string{"x"}, Message: "${a}"}, []string{"Message refers to ${a}"}},
		{"exclude vetoes contains", logline.Rule{Reason: "R", Contains: []string{"table full"}, Exclude: []string{"full"}}, []string{`Exclude "full" occurs in Contains "table full": the rule can never match`}},
		{"all at once", logline.Rule{Pattern: `(`, Sources: []logline.Source{"x"}}, []string{"reason is required", "unknown source", "at least one non-empty Contains", "invalid Pattern", "Accept is required"}},
		{"no provenance", logline.Rule{Reason: "R", Contains: []string{"x"}, Accept: []logline.Provenance{}}, []string{"rule 0 (R): Accept is required"}},
		{"unknown provenance", logline.Rule{Reason: "R", Contains: []string{"x"}, Accept: []logline.Provenance{"kubelet"}}, []string{`rule 0 (R): unknown provenance "kubelet"`}},
		{"unit without a type", logline.Rule{Reason: "R", Contains: []string{"x"}, Accept: logline.ByUnits("kubelet")}, []string{"a unit name ends in its type"}},
		{"bad unit name", logline.Rule{Reason: "R", Contains: []string{"x"}, Accept: logline.ByUnits("kube let.service")}, []string{"is not allowed in a unit name"}},
		{"relative file", logline.Rule{Reason: "R", Contains: []string{"x"}, Accept: []logline.Provenance{logline.ByFile("var/log/x")}}, []string{"absolute, clean path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rule.Accept == nil && tc.name != "all at once" {
				tc.rule.Accept = everyone
			}
			ok := logline.Rule{Reason: "OK", Contains: []string{"fine"}, Accept: everyone}
			m, err := Compile([]logline.Rule{tc.rule, ok})
			if err == nil {
				t.Fatalf("Compile accepted %+v", tc.rule)
			}
			if m != nil {
				t.Error("Compile returned a matcher with an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "rule 1") {
				t.Errorf("error blames the valid rule: %v", err)
			}
		})
	}
}

func TestCompileReportsRuleIndex(t *testing.T) {
	_, err := Compile([]logline.Rule{
		{Reason: "A", Contains: []string{"a"}, Accept: everyone},
		{Reason: "B", Contains: []string{"b"}, Pattern: `[`, Accept: everyone},
		{Reason: "C", Accept: everyone},
	})
	if err == nil || !strings.Contains(err.Error(), "rule 1 (B): invalid Pattern") || !strings.Contains(err.Error(), "rule 2 (C): at least one") {
		t.Errorf("error %v does not name rules 1 and 2", err)
	}
}

func TestMatch(t *testing.T) {
	kmsgL := func(s string) logline.Line {
		return logline.Line{Source: logline.Kmsg, Origin: logline.Origin{Kernel: true}, Text: s}
	}
	jour := func(unit, s string) logline.Line {
		return logline.Line{Source: logline.Journal, Unit: unit, Origin: logline.Origin{Root: true}, Text: s}
	}
	file := func(path, s string) logline.Line { return logline.Line{Source: logline.File, Unit: path, Text: s} }
	for _, tc := range []struct {
		name  string
		rules []logline.Rule
		line  logline.Line
		want  []got
	}{
		{
			name:  "literal only, message is the line",
			rules: []logline.Rule{{Reason: "Full", Contains: []string{"table full"}}},
			line:  kmsgL("nf_conntrack: table full, dropping packet"),
			want:  []got{{Reason: "Full", Message: "nf_conntrack: table full, dropping packet"}},
		},
		{
			name:  "prefilter: a pattern alone does not match",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"segfault"}, Pattern: `.*`}},
			line:  kmsgL("general protection fault"),
		},
		{
			name:  "every Contains literal is required",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"INFO: task ", " blocked for more than "}}},
			line:  kmsgL("INFO: task java:42 exited"),
		},
		{
			name:  "Contains literals in any order and overlapping",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"more than", "INFO: task", "task"}}},
			line:  kmsgL("INFO: task x:1 blocked for more than 120 seconds."),
			want:  []got{{Reason: "R", Message: "INFO: task x:1 blocked for more than 120 seconds."}},
		},
		{
			name:  "empty Contains entries are ignored",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"", "oops", ""}}},
			line:  kmsgL("oops"),
			want:  []got{{Reason: "R", Message: "oops"}},
		},
		{
			name:  "source selected",
			rules: []logline.Rule{{Reason: "R", Sources: []logline.Source{logline.Kmsg}, Contains: []string{"Killed process"}}},
			line:  jour("kubelet.service", "Killed process 12"),
		},
		{
			name:  "any source when Sources is empty",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"Killed process"}}},
			line:  file("/var/log/messages", "Killed process 12"),
			want:  []got{{Reason: "R", Message: "Killed process 12"}},
		},
		{
			name:  "unit selected",
			rules: []logline.Rule{{Reason: "R", Accept: logline.ByUnits("kubelet.service"), Contains: []string{"PLEG is not healthy"}}},
			line:  jour("containerd.service", "PLEG is not healthy"),
		},
		{
			name:  "unit matches",
			rules: []logline.Rule{{Reason: "R", Accept: logline.ByUnits("crio.service", "kubelet.service"), Contains: []string{"PLEG is not healthy"}}},
			line:  jour("kubelet.service", "PLEG is not healthy"),
			want:  []got{{Reason: "R", Message: "PLEG is not healthy"}},
		},
		{
			name:  "a unit does not vouch for the kernel",
			rules: []logline.Rule{{Reason: "R", Accept: logline.ByUnits("kubelet.service"), Contains: []string{"hung"}}},
			line:  kmsgL("hung"),
		},
		{
			name:  "file paths",
			rules: []logline.Rule{{Reason: "R", Accept: []logline.Provenance{logline.ByFile("/var/log/syslog")}, Contains: []string{"hung"}}},
			line:  file("/var/log/messages", "hung"),
		},
		{
			name:  "file path matches",
			rules: []logline.Rule{{Reason: "R", Accept: []logline.Provenance{logline.ByFile("/var/log/messages")}, Contains: []string{"hung"}}},
			line:  file("/var/log/messages", "hung"),
			want:  []got{{Reason: "R", Message: "hung"}},
		},
		{
			name:  "exclude vetoes",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"fork rejected by pids controller in "}, Exclude: []string{"", "in /kubepods"}}},
			line:  kmsgL("cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice/pod1"),
		},
		{
			name:  "exclude absent",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"fork rejected by pids controller in "}, Exclude: []string{"", "in /kubepods"}}},
			line:  kmsgL("cgroup: fork rejected by pids controller in /system.slice/containerd.service"),
			want:  []got{{Reason: "R", Message: "cgroup: fork rejected by pids controller in /system.slice/containerd.service"}},
		},
		{
			name: "named groups and message expansion",
			rules: []logline.Rule{{Reason: "SoftLockup", Contains: []string{"soft lockup"},
				Pattern: `CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s! \[(?P<comm>.*):(?P<pid>\d+)\]`,
				Message: "CPU#${cpu} stuck ${secs}s in ${comm} (${pid}); $cpu ${cpu"}},
			line: kmsgL("watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]"),
			want: []got{{Reason: "SoftLockup", Message: "CPU#3 stuck 23s in kworker/3:1 (123); $cpu ${cpu",
				Groups: map[string]string{"cpu": "3", "secs": "23", "comm": "kworker/3:1", "pid": "123"}}},
		},
		{
			name:  "optional group that did not take part is empty",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"Failed with result"}, Pattern: `(?:(?P<unit>\S+): )?Failed with result '(?P<result>[^']+)'`, Message: "[${unit}] ${result}"}},
			line:  jour("init.scope", "Failed with result 'timeout'."),
			want:  []got{{Reason: "R", Message: "[] timeout", Groups: map[string]string{"unit": "", "result": "timeout"}}},
		},
		{
			name:  "unnamed groups give no Groups",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"Oops"}, Pattern: `^(Internal error: )?Oops: (\d+)`}},
			line:  kmsgL("Oops: 0002 [#1] SMP NOPTI"),
			want:  []got{{Reason: "R", Message: "Oops: 0002 [#1] SMP NOPTI"}},
		},
		{
			name:  "pattern must match after the prefilter",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"BUG: "}, Pattern: `^BUG: \S`}},
			line:  kmsgL("watchdog: BUG: soft lockup"),
		},
		{
			name: "several rules match one line, in rule order",
			rules: []logline.Rule{
				{Reason: "Specific", Contains: []string{"nf_conntrack: table full"}},
				{Reason: "Other", Contains: []string{"segfault"}},
				{Reason: "Generic", Contains: []string{"table full"}},
				{Reason: "Same", Contains: []string{"table full"}, Message: "again"},
				{Reason: "Char", Contains: []string{"k"}},
			},
			line: kmsgL("nf_conntrack: table full, dropping packet"),
			want: []got{
				{Reason: "Specific", Message: "nf_conntrack: table full, dropping packet"},
				{Reason: "Generic", Message: "nf_conntrack: table full, dropping packet"},
				{Reason: "Same", Message: "again"},
				{Reason: "Char", Message: "nf_conntrack: table full, dropping packet"},
			},
		},
		{
			name:  "empty line",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"x"}}},
			line:  kmsgL(""),
		},
		{
			name:  "binary and invalid UTF-8",
			rules: []logline.Rule{{Reason: "R", Contains: []string{"\xff\x00"}}},
			line:  kmsgL("a\xff\x00b"),
			want:  []got{{Reason: "R", Message: "a\xff\x00b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.rules {
				if tc.rules[i].Accept == nil {
					tc.rules[i].Accept = everyone
				}
			}
			m, err := Compile(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			g := matchAll(m, tc.line)
			if !reflect.DeepEqual(g, tc.want) {
				t.Errorf("got  %+v\nwant %+v", g, tc.want)
			}
			if ref := reference(tc.rules, tc.line); !reflect.DeepEqual(g, ref) {
				t.Errorf("matcher %+v\nreference %+v", g, ref)
			}
		})
	}
}

func TestManyRulesKeepOrder(t *testing.T) {
	// More rules than the on-stack bitset holds.
	var rs []logline.Rule
	for i := range 300 {
		rs = append(rs, logline.Rule{Reason: fmt.Sprint("R", i), Contains: []string{fmt.Sprintf("<lit-%03d>", i)}, Accept: everyone})
	}
	rs = append(rs, logline.Rule{Reason: "Last", Contains: []string{"lit-"}, Accept: everyone})
	m, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	line := logline.Line{Source: logline.Kmsg, Origin: logline.Origin{Kernel: true}, Text: "x <lit-299> <lit-007> <lit-064> <lit-063> <lit-256>"}
	var reasons []string
	m.Match(line, func(mt logline.Match) { reasons = append(reasons, mt.Reason) })
	if want := []string{"R7", "R63", "R64", "R256", "R299", "Last"}; !slices.Equal(reasons, want) {
		t.Errorf("reasons %v, want %v", reasons, want)
	}
}

func TestEmptyRuleSet(t *testing.T) {
	m, err := Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Match(logline.Line{Text: "anything"}, func(logline.Match) { t.Error("match with no rules") })
}

// TestPrefilterAgainstContains checks the automaton on many small random
// anchor sets over a tiny alphabet, where anchors overlap and nest a lot.
func TestPrefilterAgainstContains(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	word := func(max int) string {
		b := make([]byte, rnd.IntN(max)+1)
		for i := range b {
			b[i] = "abc"[rnd.IntN(3)]
		}
		return string(b)
	}
	for range 2000 {
		anchors := make([]string, rnd.IntN(12)+1)
		for i := range anchors {
			anchors[i] = word(5)
		}
		p := newPrefilter(anchors)
		for range 20 {
			text := word(30)
			hits := make([]uint64, 1)
			found := p.scan(text, hits)
			wantAny := false
			for i, a := range anchors {
				want := strings.Contains(text, a)
				wantAny = wantAny || want
				if got := hits[0]&(1<<i) != 0; got != want {
					t.Fatalf("anchors %q text %q: anchor %q hit=%v, want %v", anchors, text, a, got, want)
				}
			}
			if found != wantAny {
				t.Fatalf("anchors %q text %q: found=%v", anchors, text, found)
			}
		}
	}
}

func TestCorpus(t *testing.T) {
	m, err := Compile(benchRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range noiseLines {
		if g := matchAll(m, l); len(g) > 0 {
			t.Errorf("noise line %q matched %+v", l.Text, g)
		}
	}
	for _, h := range hitLines {
		g := matchAll(m, h.line)
		var reasons []string
		for _, x := range g {
			reasons = append(reasons, x.Reason)
		}
		if !slices.Equal(reasons, h.reasons) {
			t.Errorf("line %q matched %v, want %v", h.line.Text, reasons, h.reasons)
		}
		if ref := reference(benchRules, h.line); !reflect.DeepEqual(g, ref) {
			t.Errorf("line %q: matcher %+v\nreference %+v", h.line.Text, g, ref)
		}
	}
	// A few expansions, checked by hand.
	for _, tc := range []struct{ text, want string }{
		{"watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]", "CPU#3 stuck for 23s (kworker/3:1, PID 123)"},
		{"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", "GPU 0000:3b:00: Xid 79: pid=1234, name=python3, GPU has fallen off the bus."},
		{"I/O error, dev nvme0n1, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2", "I/O error on nvme0n1 at sector 123456"},
	} {
		if g := matchAll(m, kmsg(tc.text)); len(g) != 1 || g[0].Message != tc.want {
			t.Errorf("line %q: %+v, want message %q", tc.text, g, tc.want)
		}
	}
}
