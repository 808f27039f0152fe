package rules

import (
	"testing"

	"nodemend.dev/nodemend/pkg/logline"
)

func benchmarkMatch(b *testing.B, lines []logline.Line) {
	m, err := Compile(benchRules)
	if err != nil {
		b.Fatal(err)
	}
	bytes := 0
	for _, l := range lines {
		bytes += len(l.Text)
	}
	matches := 0
	count := func(logline.Match) { matches++ }
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lines {
			m.Match(l, count)
		}
	}
	n := float64(b.N) * float64(len(lines))
	b.ReportMetric(n/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/line")
	b.ReportMetric(float64(matches)/n, "matches/line")
}

// BenchmarkMatchNoise is the common case: lines that match no rule.
func BenchmarkMatchNoise(b *testing.B) { benchmarkMatch(b, noiseLines) }

// BenchmarkMatchHits is lines that match a rule (regex, groups, message).
func BenchmarkMatchHits(b *testing.B) {
	var lines []logline.Line
	for _, h := range hitLines {
		lines = append(lines, h.line)
	}
	benchmarkMatch(b, lines)
}
