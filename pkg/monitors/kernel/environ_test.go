package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/health"
)

// environ is /proc/PID/environ for n variables, as the kernel shows it:
// NUL-terminated NAME=value strings (environ(7)). Kubernetes service links
// add seven variables per Service of the pod's namespace.
func environ(n int) string {
	var b strings.Builder
	base := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=web-5d9f8b7c6-x2x7k", "HOME=/root"}
	for i := 0; i < n; i++ {
		if i < len(base) {
			b.WriteString(base[i])
		} else {
			svc := fmt.Sprintf("SVC_%04d", i/7)
			fields := []string{"_SERVICE_HOST=10.100.12.7", "_SERVICE_PORT=8080", "_PORT=tcp://10.100.12.7:8080",
				"_PORT_8080_TCP=tcp://10.100.12.7:8080", "_PORT_8080_TCP_PROTO=tcp", "_PORT_8080_TCP_PORT=8080", "_PORT_8080_TCP_ADDR=10.100.12.7"}
			b.WriteString(svc + fields[i%7])
		}
		b.WriteByte(0)
	}
	return b.String()
}

func TestEnvironmentCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*hostroot.Root)
		thr     float64
		want    string
		wantErr bool
	}{
		{name: "processes without environ files (kernel threads, exited) are skipped"},
		{
			name: "ordinary environments",
			setup: func(r *hostroot.Root) {
				r.WriteFile("proc/1/environ", environ(12))
				r.WriteFile("proc/1034/environ", environ(40))
				r.WriteFile("proc/2140/environ", "")
			},
		},
		{
			name:  "at the threshold is not above it",
			setup: func(r *hostroot.Root) { r.WriteFile("proc/2140/environ", environ(1000)) },
		},
		{
			name:  "one process above the threshold",
			setup: func(r *hostroot.Root) { r.WriteFile("proc/812/environ", environ(1001)) },
			want:  "PID 812 (containerd) has 1001 environment variables (threshold 1000); for pods, check the namespace's Service count and set enableServiceLinks: false",
		},
		{
			name: "the largest is named, the others counted",
			setup: func(r *hostroot.Root) {
				r.WriteFile("proc/1034/environ", environ(1500))
				r.WriteFile("proc/4242/environ", environ(2403))
				r.WriteFile("proc/1/environ", environ(1200))
			},
			want: "PID 4242 (java) has 2403 environment variables (threshold 1000), and 2 more processes have more than the threshold",
		},
		{
			name:  "configured threshold",
			setup: func(r *hostroot.Root) { r.WriteFile("proc/1/environ", environ(60)) },
			thr:   50,
			want:  "PID 1 (systemd) has 60 environment variables (threshold 50)",
		},
		{
			name:    "missing proc",
			setup:   func(r *hostroot.Root) { r.Remove("proc") },
			wantErr: true,
		},
		{name: "invalid threshold", thr: -1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hostroot.New(t).WithProc()
			if tc.setup != nil {
				tc.setup(root)
			}
			thr := map[string]float64{}
			if tc.thr != 0 {
				thr[health.ReasonLargeEnvironment] = tc.thr
			}
			got, err := runCheck(t, newHostMonitor(root, thr, nil), "kernel-environment")
			checkResult(t, got, err, health.ReasonLargeEnvironment, tc.want, tc.wantErr)
		})
	}
}

// countEnviron counts strings across read boundaries, a last string without
// its NUL, and skips empty strings.
func TestCountEnviron(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
	}{
		{"", 0},
		{"A=1\x00", 1},
		{"A=1\x00B=2\x00C=3\x00", 3},
		{"A=1\x00B=2", 2},
		{"\x00\x00A=1\x00\x00B=2\x00", 2},
		{strings.Repeat("LONG_VARIABLE_NAME=some value\x00", 1000), 1000},
	} {
		if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "1", "environ"), []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 2, 3, 7, 64 << 10} {
			got, err := countEnviron(fd, "1", make([]byte, size))
			if err != nil || got != tc.want {
				t.Errorf("%q with %d-byte reads: %d, %v; want %d", textcut.Ellipsis(tc.content, quoteLimit), size, got, err, tc.want)
			}
		}
		if _, err := countEnviron(fd, "2", make([]byte, 16)); err != errGone {
			t.Errorf("a process without environ: %v, want errGone", err)
		}
		unix.Close(fd)
	}
}

// BenchmarkScanEnvirons is the environment check's gatherer on a node with
// 2,000 processes of 60 variables each and 50 with 1,400.
func BenchmarkScanEnvirons(b *testing.B) {
	root := hostroot.New(b)
	small, large := environ(60), environ(1400)
	for pid := 1000; pid < 3050; pid++ {
		root.AddProcess(hostroot.Process{PID: pid, PPID: 1, Comm: "worker", State: 'S'})
		env := small
		if pid >= 3000 {
			env = large
		}
		root.WriteFile(fmt.Sprintf("proc/%d/environ", pid), env)
	}
	dir := root.Path("proc")
	b.ReportAllocs()
	for b.Loop() {
		s, err := scanEnvirons(dir, 1000)
		if err != nil || len(s.Large) != 50 {
			b.Fatalf("scan %+v, %v", len(s.Large), err)
		}
	}
}
