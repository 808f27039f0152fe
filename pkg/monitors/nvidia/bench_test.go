package nvidia

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
)

// BenchmarkRules measures the nvidia rules on the kernel log's hot path: most
// lines are not XIDs and must cost only the prefilter; an XID line runs the
// per-XID rules sharing the anchor.
func BenchmarkRules(b *testing.B) {
	m := New(detection.Env{}, Options{})
	matcher, err := rules.Compile(m.Rules())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, text string }{
		{"other", "EXT4-fs (nvme0n1p1): mounted filesystem 0b1e5c3a-6f4d-4a2b-9c1e-8d7f6e5a4b3c r/w with ordered data mode."},
		{"xid79", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."},
	} {
		line := monitortest.Kernel(tc.text, time.Time{})
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				matcher.Match(line, func(mt logline.Match) { m.Interpret(mt) })
			}
		})
	}
}

// BenchmarkEvalHealth measures one device's health evaluation (8 GPUs per
// node every check period).
func BenchmarkEvalHealth(b *testing.B) {
	s := Sample{Fields: []FieldValue{UintField(FieldECCDBEVolatileTotal, 0), UintField(FieldRetiredPending, 0),
		UintField(FieldRemappedPending, 0), UintField(FieldRemappedFailure, 0), UintField(FieldPCIeReplayCounter, 3)},
		ClocksEventReasons: Value{V: ClocksSwPowerCap, OK: true}, NVLinks: make([]LinkState, 18),
		Fabric: FabricInfo{Supported: true, State: FabricStateCompleted, HealthMask: 0x51aa, HealthSummary: FabricSummaryHealthy}}
	for i := range s.NVLinks {
		s.NVLinks[i] = LinkUp
	}
	in := healthInput{Device: Device{PCI: "0000:1b:00"}, Sample: s, ReplaysPerMinute: 8}
	var st deviceState
	b.ReportAllocs()
	for b.Loop() {
		_, st = evalHealth(in, st)
	}
}
