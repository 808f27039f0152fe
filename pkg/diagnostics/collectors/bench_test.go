package collectors_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
)

// logFiles are the host logs a big node carries.
func logFiles() []string {
	return []string{"var/log/syslog", "var/log/messages", "var/log/kubelet.log", "var/log/containerd.log", "var/log/kern.log", "var/log/cloud-init-output.log"}
}

// writeLogs fills the fake host with total bytes of varied, realistic log
// lines (kubelet, containerd, kernel), a secret now and then.
func writeLogs(b *testing.B, h *diagtest.Host, total int64) {
	b.Helper()
	rnd := rand.New(rand.NewPCG(42, 7))
	pods := []string{"coredns-5d78c9869d-abcde", "aws-node-x7k2p", "trainer-0", "ebs-csi-node-9zq4w", "nodemend-agent-4j2kd"}
	per := total / int64(len(logFiles()))
	for _, rel := range logFiles() {
		p := h.Path(rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		var n int64
		for i := 0; n < per; i++ {
			var line string
			ts := time.Unix(1718000000+int64(i/50), int64(i%50)*20_000_000).UTC().Format("Jan 02 15:04:05.000000")
			switch rnd.IntN(6) {
			case 0:
				line = fmt.Sprintf("%s ip-10-0-1-23 kubelet[1034]: I0612 10:00:01.%06d 1034 kubelet.go:%d] \"SyncLoop (PLEG): event for pod\" pod=\"kube-system/%s\" event={\"ID\":\"%x\",\"Type\":\"ContainerStarted\",\"Data\":\"%x\"}\n",
					ts, rnd.IntN(1e6), 2000+rnd.IntN(500), pods[rnd.IntN(len(pods))], rnd.Uint64(), rnd.Uint64())
			case 1:
				line = fmt.Sprintf("%s ip-10-0-1-23 containerd[812]: time=\"2024-06-12T10:00:01.%09dZ\" level=info msg=\"StartContainer for \\\"%x\\\" returns successfully\"\n",
					ts, rnd.IntN(1e9), rnd.Uint64())
			case 2:
				line = fmt.Sprintf("%s ip-10-0-1-23 kernel: [%d.%06d] eni%x: renamed from tmp%x; IPv6: ADDRCONF(NETDEV_CHANGE): link becomes ready\n",
					ts, rnd.IntN(400000), rnd.IntN(1e6), rnd.Uint32(), rnd.Uint32())
			case 3:
				line = fmt.Sprintf("%s ip-10-0-1-23 kubelet[1034]: E0612 10:00:01.%06d 1034 pod_workers.go:1298] \"Error syncing pod, skipping\" err=\"failed to \\\"StartContainer\\\" for \\\"app\\\" with CrashLoopBackOff: \\\"back-off %ds restarting failed container\\\"\" pod=\"default/%s\" podUID=\"%x\"\n",
					ts, rnd.IntN(1e6), 10*rnd.IntN(30), pods[rnd.IntN(len(pods))], rnd.Uint64())
			case 4:
				line = fmt.Sprintf("%s ip-10-0-1-23 systemd[1]: Started cri-containerd-%x.scope - libcontainer container %x.\n", ts, rnd.Uint64(), rnd.Uint64())
			default:
				if rnd.IntN(200) == 0 {
					line = fmt.Sprintf("%s ip-10-0-1-23 app[99]: retrying with Authorization: Bearer planted%x\n", ts, rnd.Uint64())
				} else {
					line = fmt.Sprintf("%s ip-10-0-1-23 aws-node[2211]: {\"level\":\"debug\",\"ts\":\"2024-06-12T10:00:01.%03dZ\",\"caller\":\"ipamd/ipamd.go:%d\",\"msg\":\"IP pool stats: total=%d, used=%d, c.maxIPsPerENI=%d\"}\n",
						ts, rnd.IntN(1000), 600+rnd.IntN(100), rnd.IntN(60), rnd.IntN(60), 15)
				}
			}
			k, _ := w.WriteString(line)
			n += int64(k)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// peakRSS samples the process's resident set while f runs (VmRSS of
// /proc/self/status every 5ms) and returns the highest value.
func peakRSS(f func()) int64 {
	var peak atomic.Int64
	read := func() {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if kb*1024 > peak.Load() {
					peak.Store(kb * 1024)
				}
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	read()
	return peak.Load()
}

// BenchmarkBundle makes a whole bundle (every category, redaction, tar.gz
// streamed to a file) on a fake host with the given amount of logs.
// "typical" keeps the default 32 MiB tail per log file; "all" takes every
// byte, to show that memory does not grow with the data.
func BenchmarkBundle(b *testing.B) {
	for _, tc := range []struct {
		name string
		logs int64
		tail int64
	}{
		{"logs=100MB/tail=32MiB", 100 << 20, 0},
		{"logs=500MB/tail=32MiB", 500 << 20, 0},
		{"logs=100MB/tail=all", 100 << 20, 1 << 40},
		{"logs=500MB/tail=all", 500 << 20, 1 << 40},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := diagtest.NewHost(b)
			writeLogs(b, h, tc.logs)
			e := env(h)
			e.LogTailBytes = tc.tail
			out := filepath.Join(b.TempDir(), "bundle.tar.gz")
			runtime.GC()
			var size int64
			var peak int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := peakRSS(func() {
					f, err := os.Create(out)
					if err != nil {
						b.Fatal(err)
					}
					w := bufio.NewWriterSize(f, 256<<10)
					bw := bundle.New(w, bundle.Options{Root: "b", MaxBytes: 1 << 30})
					res, _, err := collect.Run(context.Background(), collectors.For(e, nil), bw, collect.Options{SpoolDir: filepath.Join(b.TempDir(), "spool")})
					if err != nil {
						b.Fatal(err)
					}
					if err := bw.Close(bundle.Manifest{Collectors: res}); err != nil {
						b.Fatal(err)
					}
					_ = w.Flush()
					st, _ := f.Stat()
					size = st.Size()
					f.Close()
				})
				peak = max(peak, p)
			}
			b.StopTimer()
			b.ReportMetric(float64(size)/(1<<20), "bundle-MiB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
			// Log bytes that went through redaction and compression.
			tail := tc.tail
			if tail == 0 {
				tail = 32 << 20
			}
			n := int64(len(logFiles()))
			b.SetBytes(n * min(tail, tc.logs/n))
		})
	}
}
