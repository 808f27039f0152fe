package kernel

import (
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
)

// BenchmarkScanProcesses measures the zombie check's gatherer on a node with
// 5,000 processes (250 of them zombies): one directory read and 5,000 stat
// reads per run.
func BenchmarkScanProcesses(b *testing.B) {
	root := hostroot.New(b)
	for pid := 1000; pid < 6000; pid++ {
		p := hostroot.Process{PID: pid, PPID: 1, Comm: "worker", State: 'S'}
		if pid%20 == 0 {
			p.State, p.PPID = 'Z', 4242
		}
		root.AddProcess(p)
	}
	dir := root.Path("proc")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, err := scanProcesses(dir)
		if err != nil {
			b.Fatal(err)
		}
		if s.Processes != 5000 || s.Zombies != 250 {
			b.Fatalf("scan %+v", s)
		}
	}
}
