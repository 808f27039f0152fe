package rules

import (
	"reflect"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/logline"
)

// fuzzRules builds up to 8 rules from spec, one per line:
// "contains|contains...!exclude!exclude...". The first rule gets pattern.
// Odd rules select journal lines of unit; rule 2 selects kmsg only and
// believes the kernel; rule 4 believes systemd, rule 6 root, the others
// every writer.
func fuzzRules(spec, pattern, unit string) []logline.Rule {
	var rs []logline.Rule
	for i, l := range strings.SplitN(spec, "\n", 8) {
		parts := strings.Split(l, "!")
		r := logline.Rule{Reason: "R" + string(rune('0'+i)), Contains: strings.Split(parts[0], "|"), Exclude: parts[1:], Accept: everyone}
		if i == 0 {
			r.Pattern = pattern
		}
		switch {
		case i%2 == 1:
			r.Sources, r.Accept = []logline.Source{logline.Journal}, logline.ByUnits(unit)
		case i == 2:
			r.Sources, r.Accept = []logline.Source{logline.Kmsg}, []logline.Provenance{logline.ByKernel}
		case i == 4:
			r.Accept = []logline.Provenance{logline.BySystemd}
		case i == 6:
			r.Accept = []logline.Provenance{logline.ByRoot}
		}
		rs = append(rs, r)
	}
	return rs
}

// FuzzMatch checks that random rules and lines do not panic, that every match
// holds all its rule's Contains literals and none of its Exclude literals, and
// that the matcher agrees with the obvious implementation.
func FuzzMatch(f *testing.F) {
	f.Add("table full", "", "x.service", "nf_conntrack: table full, dropping packet", uint8(0), "", uint8(1))
	f.Add("BUG: !BUG: soft lockup\nsoft lockup|CPU#\nBUG", `^BUG: (?P<what>\S+)`, "kubelet.service",
		"watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:123]", uint8(0), "", uint8(0))
	f.Add("Probe failed|probeType=\"Liveness\"\nProbe failed\nab|ba|aba", `pod="(?P<pod>[^"]*)"`, "kubelet.service",
		`"Probe failed" probeType="Liveness" pod="default/web-0" containerName="web"`, uint8(1), "kubelet.service", uint8(4))
	f.Add("aa|aaa\na!aa\nabab|bab\nb\na\nb\na", "", "u.scope", "abababaaab", uint8(2), "u.scope", uint8(6))
	for _, h := range hitLines {
		n := len(h.line.Text) / 3
		src, who := uint8(0), uint8(1)
		if h.line.Source == logline.Journal {
			src, who = 1, 4
			if h.line.Origin.Manager {
				who = 6
			}
		}
		f.Add(h.line.Text[n:n+8], "", h.line.Unit, h.line.Text, src, h.line.Unit, who)
	}
	f.Fuzz(func(t *testing.T, spec, pattern, unit, text string, src uint8, lineUnit string, who uint8) {
		rs := fuzzRules(spec, pattern, unit)
		m, err := Compile(rs)
		if err != nil {
			return // rules without a literal, a bad pattern...: rejected, fine
		}
		line := logline.Line{
			Source: []logline.Source{logline.Kmsg, logline.Journal, logline.File}[src%3],
			Unit:   lineUnit,
			Origin: logline.Origin{Kernel: who&1 != 0, Manager: who&2 != 0, Root: who&4 != 0},
			Text:   text,
		}
		g, rejected := matchAndReject(m, line)
		for _, x := range g {
			r := rs[x.Reason[1]-'0']
			for _, l := range r.Contains {
				if !strings.Contains(text, l) {
					t.Fatalf("%s matched %q without Contains %q", x.Reason, text, l)
				}
			}
			for _, l := range r.Exclude {
				if l != "" && strings.Contains(text, l) {
					t.Fatalf("%s matched %q despite Exclude %q", x.Reason, text, l)
				}
			}
		}
		ref, refRejected := referenceAndRejects(rs, line)
		if !reflect.DeepEqual(g, ref) || !reflect.DeepEqual(rejected, refRejected) {
			t.Fatalf("rules %+v line %+v:\nmatcher   %+v rejected %v\nreference %+v rejected %v", rs, line, g, rejected, ref, refRejected)
		}
	})
}
