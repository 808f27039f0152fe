package rules_test

import (
	"fmt"
	"testing"

	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

// customRules is n operator rules of the shapes docs/agent-config.md shows
// (an in-house driver's kernel line, a storage appliance's daemon, a site
// file): each a distinct literal prefilter and an RE2 pattern with named
// groups, spread over the three sources.
func customRules(n int) []logline.Rule {
	shapes := []func(i int) logline.Rule{
		func(i int) logline.Rule {
			return logline.Rule{Reason: fmt.Sprintf("CustomAcmeNIC%dLinkReset", i), Sources: []logline.Source{logline.Kmsg},
				Accept: []logline.Provenance{logline.ByKernel}, Contains: []string{fmt.Sprintf("acmenic%d: link reset timeout", i)},
				Pattern: fmt.Sprintf(`acmenic%d: link reset timeout after (?P<ms>\d+) ms on port (?P<port>\d+)`, i),
				Message: "ACME NIC port ${port} did not come back from a reset in ${ms} ms"}
		},
		func(i int) logline.Rule {
			return logline.Rule{Reason: fmt.Sprintf("CustomVaultAppliance%dPathError", i), Sources: []logline.Source{logline.Journal},
				Accept: []logline.Provenance{logline.ByUnit(fmt.Sprintf("vault-agent-%d.service", i))}, Contains: []string{fmt.Sprintf("VA%03d path error", i)},
				Pattern: fmt.Sprintf(`VA%03d path error on (?P<path>\S+): (?P<why>.+)`, i),
				Message: "storage appliance path ${path} failed: ${why}"}
		},
		func(i int) logline.Rule {
			return logline.Rule{Reason: fmt.Sprintf("CustomSiteCheck%dFailed", i), Sources: []logline.Source{logline.File},
				Accept: []logline.Provenance{logline.ByFile(fmt.Sprintf("/var/log/site/check-%d.log", i))}, Contains: []string{fmt.Sprintf("site-check-%d FAILED", i)},
				Pattern: fmt.Sprintf(`site-check-%d FAILED: (?P<what>.+)`, i)}
		},
	}
	out := make([]logline.Rule, n)
	for i := range out {
		out[i] = shapes[i%len(shapes)](i)
	}
	return out
}

// BenchmarkShippedAndCustomRulesNoise is BenchmarkShippedRulesNoise with 100
// operator rules besides the shipped ones (docs/agent-config.md, custom
// rules): the goal is at least 4 M non-matching lines per CPU second.
func BenchmarkShippedAndCustomRulesNoise(b *testing.B) {
	all := append(shippedRules(), customRules(100)...)
	m, err := rules.Compile(all)
	if err != nil {
		b.Fatal(err)
	}
	lines := rules.NoiseLines
	matches := 0
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		for _, l := range lines {
			m.Match(l, func(logline.Match) { matches++ })
		}
	}
	if matches != 0 {
		b.Fatalf("%d noise lines matched a rule", matches)
	}
	n := float64(b.N) * float64(len(lines))
	b.ReportMetric(n/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(n/(cpuTime()-cpu0).Seconds(), "lines/cpu-s")
	b.ReportMetric(float64(len(all)), "rules")
}
