package rules_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/amdgpu"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
	"nodemend.dev/nodemend/pkg/monitors/networking"
	"nodemend.dev/nodemend/pkg/monitors/neuron"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/storage"
	"nodemend.dev/nodemend/pkg/rules"
)

// shippedRules is every log rule of every monitor, as an agent with all
// monitors enabled compiles them.
func shippedRules() []logline.Rule {
	var all []logline.Rule
	for _, rs := range [][]logline.Rule{
		kernel.Rules(), containerruntime.New(detection.Env{}, containerruntime.Options{}).Rules(), networking.Rules(),
		storage.Rules(), nvidia.Rules(), neuron.Rules(), amdgpu.Rules(),
	} {
		all = append(all, rs...)
	}
	return all
}

// BenchmarkShippedRulesNoise is the agent's hot path: the shipped rules on
// lines of a busy node that match none of them. lines/s on one core is the
// figure quoted in docs/agent.md.
func BenchmarkShippedRulesNoise(b *testing.B) {
	all := shippedRules()
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
		b.Fatalf("%d noise lines matched a shipped rule", matches)
	}
	n := float64(b.N) * float64(len(lines))
	b.ReportMetric(n/b.Elapsed().Seconds(), "lines/s")
	// Per CPU second: on a shared machine wall time measures the neighbours.
	b.ReportMetric(n/(cpuTime()-cpu0).Seconds(), "lines/cpu-s")
	b.ReportMetric(float64(len(all)), "rules")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
