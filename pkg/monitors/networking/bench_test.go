package networking

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/pkg/detection"
)

// BenchmarkCheckRound is the CPU of one round of every networking check on
// this machine (host root /, the process's network namespace): netlink
// dumps, ethtool ioctls on each interface, /proc reads, a /proc scan for CNI
// agents (none installed here), a refused kube-proxy probe and one DNS query.
func BenchmarkCheckRound(b *testing.B) {
	m := New(detection.Env{}, Options{})
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

// BenchmarkCheckRoundNoDNS leaves out the DNS query, whose cost is mostly
// the resolver's round trip, not this process's CPU.
func BenchmarkCheckRoundNoDNS(b *testing.B) {
	m := New(detection.Env{}, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		for _, c := range m.Checks() {
			if c.Name == "net-dns" {
				continue
			}
			if _, err := c.Run(ctx); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
		}
	}
	reportCPU(b, cpu0)
}

// BenchmarkEvalInterfaces: the pure half of the interface check on a busy
// node, 2 NICs and 110 pod veths.
func BenchmarkEvalInterfaces(b *testing.B) {
	snap := netSnapshot{Links: []linkInfo{lo(), ens5()}, DefaultRoutes: 1}
	for i := range 110 {
		v := podVeth()
		v.Name, v.AdminUp, v.Running = fmt.Sprintf("eni%011x", i), true, true
		snap.Links = append(snap.Links, v)
	}
	ex := defaultExclusion()
	var st ifaceState
	b.ReportAllocs()
	for b.Loop() {
		st, _ = evalInterfaces(st, snap, ex, ifaceThresholds{2, 2, 2}, t0)
	}
}

// BenchmarkIPAMDLogLines: the IPAMD log is busy; almost every line must be
// rejected before JSON decoding.
func BenchmarkIPAMDLogLines(b *testing.B) {
	lines := [][]byte{
		[]byte(`{"level":"debug","ts":"2024-11-21T19:12:29.123Z","caller":"ipamd/ipamd.go:712","msg":"IP pool stats: Total IPs/Prefixes = 58/0, AssignedIPs/CooldownIPs: 12/0, c.maxIPsPerENI = 29"}`),
		[]byte(`{"level":"info","ts":"2024-11-21T19:12:29.124Z","caller":"rpc/rpc.pb.go:713","msg":"Received AddNetwork for NS /var/run/netns/cni-1, Sandbox 5f3a, ifname eth0"}`),
		[]byte(`{"level":"error","ts":"2024-11-21T19:12:29.125Z","caller":"k8sapi/k8sutils.go:79","msg":"Unable to reach API Server, dial tcp 172.20.0.1:443: i/o timeout"}`),
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = evalIPAMDLog(ipamdLog{}, lines)
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
