package storage

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/pkg/detection"
)

// BenchmarkCheckRound is one round of every storage check on this machine:
// its mount table parsed twice, statfs of each configured filesystem, a
// write+fsync+remove probe (in a temporary directory on the root
// filesystem), PSI, and the NVMe sysfs scan (no NVMe here).
func BenchmarkCheckRound(b *testing.B) {
	m := New(detection.Env{}, Options{ProbeDir: b.TempDir() + "/probe"})
	checks := m.Checks()
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		for _, c := range checks {
			if _, err := c.Run(ctx); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
		}
	}
	reportCPU(b, cpu0)
}

// BenchmarkParseMountinfo parses this machine's mount table, plus the
// fixture of a busy node (many pod mounts) repeated to 600 lines.
func BenchmarkParseMountinfo(b *testing.B) {
	data, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		b.Skip(err)
	}
	for len(data) < 600*120 {
		data = append(data, realMountinfo...)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := mountinfo.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per round since cpu0: what the agent
// costs the node, unlike ns/op, which includes waiting (fsync, a DNS round
// trip).
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
