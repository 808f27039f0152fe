package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/internal/testsupport/hostileconfig"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// BenchmarkHostileConfig measures the real nodemend-agent binary's
// resident memory while it refuses hostile config files
// (hostileconfig.Hostile, plus a 100 MB file), against its idle RSS:
//
//   - reload: an idle agent is given each hostile file in turn; its peak
//     RSS (VmHWM, reset through /proc/PID/clear_refs before each file) is
//     read once it has logged the rejection;
//   - start: the agent is started with each hostile file and exits with
//     an error; its peak RSS is the child's ru_maxrss, next to the same
//     for a small invalid file (start-baseline-rss-MiB: what starting and
//     refusing costs without a hostile file).
//
// Target: every peak under 2× the idle RSS (peak-over-idle < 2).
func BenchmarkHostileConfig(b *testing.B) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	dir := b.TempDir()
	bin := filepath.Join(dir, "nodemend-agent")
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(b, env, kubeconfig)
	root := hostroot.New(b).WithProc()
	root.AppendKmsg()
	root.AppendJournal()
	good := "sources:\n  journal:\n    mode: file\n    file: /" + hostroot.JournalFixture + "\n"
	root.WriteFile("agent.yaml", good)
	if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hostile"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	docs := hostileconfig.Hostile()
	bigFile := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(bigFile, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(bigFile, 100<<20); err != nil {
		b.Fatal(err)
	}
	args := func(cfg string) []string {
		return []string{"--kubeconfig", kubeconfig, "--node-name", "hostile", "--host-root", root.Path(""),
			"--config", cfg, "--metrics-bind-address", ""}
	}
	// replace swaps the config file atomically, as a ConfigMap update does.
	replace := func(src string) {
		tmp := root.Path("agent.yaml.tmp")
		if src == bigFile {
			if err := os.Link(bigFile, tmp); err != nil {
				b.Fatal(err)
			}
		} else if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, root.Path("agent.yaml")); err != nil {
			b.Fatal(err)
		}
	}

	for i := 0; i < b.N; i++ {
		root.WriteFile("agent.yaml", good)
		cmd := exec.Command(bin, args(root.Path("agent.yaml"))...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		rejections := watchRejections(stderr)
		time.Sleep(5 * time.Second) // past start-up
		pid := cmd.Process.Pid
		idle := memKiB(b, pid, "VmRSS:")
		maxPeak := int64(0)
		run := func(name, src string) {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				b.Fatalf("resetting the peak RSS: %v", err)
			}
			before := rejections.count()
			replace(src)
			if !rejections.waitAbove(before, 30*time.Second) {
				b.Fatalf("%s: the agent did not reject it", name)
			}
			peak := memKiB(b, pid, "VmHWM:")
			maxPeak = max(maxPeak, peak)
			fmt.Printf("reload %-30s peak RSS %5.1f MiB (idle %5.1f MiB)\n", name, float64(peak)/1024, float64(idle)/1024)
			// Back to a good config, so that the next file is a change.
			replace(good)
			time.Sleep(300 * time.Millisecond)
		}
		for _, d := range docs {
			run(d.Name, d.Data)
		}
		run("100 MB file", bigFile)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()

		// The baseline: what refusing a small invalid config costs at start.
		baseline := hostileconfig.Doc{Name: "baseline: a small invalid config", Data: "monitors: {kernel: {enabled: maybe}}\n"}
		maxStart, baseStart := int64(0), int64(0)
		for _, d := range append(append([]hostileconfig.Doc{baseline}, docs...), hostileconfig.Doc{Name: "100 MB file"}) {
			cfg := bigFile
			if d.Data != "" {
				cfg = filepath.Join(dir, "start.yaml")
				if err := os.WriteFile(cfg, []byte(d.Data), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			c := exec.Command(bin, args(cfg)...)
			out, err := c.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "config") {
				b.Fatalf("%s at start: %v\n%s", d.Name, err, out)
			}
			rss := c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
			if d.Name == baseline.Name {
				baseStart = rss
			} else {
				maxStart = max(maxStart, rss)
			}
			fmt.Printf("start  %-30s peak RSS %5.1f MiB\n", d.Name, float64(rss)/1024)
		}
		b.ReportMetric(float64(idle)/1024, "idle-rss-MiB")
		b.ReportMetric(float64(maxPeak)/1024, "reload-peak-rss-MiB")
		b.ReportMetric(float64(maxStart)/1024, "start-peak-rss-MiB")
		b.ReportMetric(float64(baseStart)/1024, "start-baseline-rss-MiB")
		b.ReportMetric(float64(max(maxPeak, maxStart))/float64(idle), "peak-over-idle")
	}
}

// rejectionLog counts the agent's "rejected new agent config" log lines.
type rejectionLog struct {
	mu   sync.Mutex
	n    int
	cond *sync.Cond
}

func watchRejections(r io.Reader) *rejectionLog {
	l := &rejectionLog{}
	l.cond = sync.NewCond(&l.mu)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "rejected new agent config") {
				l.mu.Lock()
				l.n++
				l.cond.Broadcast()
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *rejectionLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *rejectionLog) waitAbove(n int, timeout time.Duration) bool {
	deadline := time.AfterFunc(timeout, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer deadline.Stop()
	end := time.Now().Add(timeout)
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.n <= n && time.Now().Before(end) {
		l.cond.Wait()
	}
	return l.n > n
}
