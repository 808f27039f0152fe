package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/sim"
)

// agent is one nodemend-agent under measurement and what was measured.
type agent struct {
	name, label string
	// stripped is the binary that runs; unstripped the same build with its
	// symbol table, for the size breakdown.
	stripped, unstripped string
	strippedBytes        int64

	node string
	root string
	boot time.Time
	cmd  *exec.Cmd
	done chan error

	mu      sync.Mutex
	kmsgSeq uint64

	idleCPU            float64 // % of one core
	rss, anon, file    int64   // KiB, at the end of the idle phase
	peak               int64   // KiB, VmHWM at the end
	floodCPU           float64 // CPU seconds per 1,000 lines
	floodLines         int
	latP50, latMax     time.Duration
	latencies          []time.Duration
	floodRSS, floodHWM int64
}

// buildAgent builds dir's nodemend-agent as `make build` does (cgo for
// NVML's dlopen, tags), stripped and not. Both trees get the same tags, so
// that the comparison measures the code.
func buildAgent(ctx context.Context, dir, outDir, tags string, a *agent) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	a.stripped = filepath.Join(outDir, "nodemend-agent")
	a.unstripped = filepath.Join(outDir, "nodemend-agent.symbols")
	for _, b := range []struct {
		out   string
		flags []string
	}{{a.stripped, []string{"-ldflags=-s -w"}}, {a.unstripped, nil}} {
		args := append([]string{"build", "-trimpath", "-tags", tags}, b.flags...)
		args = append(args, "-o", b.out, "./cmd/nodemend-agent")
		if err := goBuild(ctx, dir, args...); err != nil {
			return err
		}
	}
	st, err := os.Stat(a.stripped)
	if err != nil {
		return err
	}
	a.strippedBytes = st.Size()
	return nil
}

func goBuild(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func writeKubeconfig(env *testenv.Env, path string) error {
	data, err := env.AdminKubeconfig("bench-agent")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// start lays out a's fake host (the simulation's healthy host and agent
// config) and starts the agent with the production defaults otherwise:
// metrics served, diagnostics on.
func (a *agent) start(ctx context.Context, env *testenv.Env, out, kubeconfig string) error {
	a.root = filepath.Join(out, "hosts", a.node)
	if err := os.RemoveAll(a.root); err != nil {
		return err
	}
	a.boot = time.Now().Add(-time.Hour)
	if err := sim.WriteHostRoot(a.root, a.boot, 0); err != nil {
		return err
	}
	cfgPath := filepath.Join(a.root, "etc", "nodemend", "agent.yaml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, []byte(sim.DefaultAgentConfig), 0o644); err != nil {
		return err
	}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.node}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	port, err := sim.FreePort()
	if err != nil {
		return err
	}
	logPath := filepath.Join(out, a.node+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	a.cmd = exec.Command(a.stripped, "--kubeconfig", kubeconfig, "--node-name", a.node, "--host-root", a.root,
		"--config", cfgPath, "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port))
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	if err := a.cmd.Start(); err != nil {
		_ = logFile.Close()
		return err
	}
	a.done = make(chan error, 1)
	go func() { a.done <- a.cmd.Wait(); _ = logFile.Close() }()
	return nil
}

func (a *agent) pid() int { return a.cmd.Process.Pid }

// alive fails once the agent has exited.
func (a *agent) alive() error {
	select {
	case err := <-a.done:
		a.done <- err
		return fmt.Errorf("the agent exited: %v (log: %s.log)", err, a.node)
	default:
		return nil
	}
}

func (a *agent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// waitReady waits until the agent published KernelReady on its Node.
func (a *agent) waitReady(ctx context.Context, env *testenv.Env) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := a.alive(); err != nil {
			return err
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
		if err == nil && kernelReady(n) != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no KernelReady condition after 2 minutes")
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func kernelReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == "KernelReady" {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// kmsg appends records (priority 6, info, unless fatal) to the host's
// kernel log in one write and returns when they were written.
func (a *agent) kmsg(prio int, msgs ...string) (time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	now := time.Now()
	usec := uint64(now.Sub(a.boot).Microseconds())
	for _, m := range msgs {
		a.kmsgSeq++
		b.WriteString(hostroot.KmsgRecord(prio, 1000+a.kmsgSeq, usec, m))
		b.WriteByte('\n')
	}
	f, err := os.OpenFile(filepath.Join(a.root, "dev", "kmsg"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return now, err
	}
	defer f.Close()
	_, err = f.WriteString(b.String())
	return now, err
}

// cpuTicks is the process's user+system time in clock ticks (USER_HZ).
func cpuTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

const ticksPerSecond = 100 // USER_HZ on Linux

// memKiB reads one field of /proc/PID/status in KiB.
func memKiB(pid int, key string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key) {
			if f := strings.Fields(line); len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}
