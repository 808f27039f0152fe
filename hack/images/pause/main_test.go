package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// children lists the PIDs whose parent is pid, zombies included.
func children(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok && strings.TrimSpace(v) == strconv.Itoa(pid) {
				n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				out = append(out, n)
			}
		}
	}
	return out
}

// As PID 1 of its own PID namespace — a pod sandbox — pause reaps the
// orphans it inherits, keeps running, and exits 0 on SIGTERM; -v prints
// its version, anything else is a usage error.
func TestPause(t *testing.T) {
	bin := buildPause(t)
	if out, err := exec.Command(bin, "-v").Output(); err != nil || !strings.Contains(string(out), "nodemend-pause") {
		t.Errorf("-v: %q %v", out, err)
	}
	var exitErr *exec.ExitError
	if err := exec.Command(bin, "--bogus").Run(); !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Errorf("--bogus: %v, want exit 2", err)
	}

	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pause in a new PID namespace (needs root): %v", err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	time.Sleep(200 * time.Millisecond) // its signal handlers

	// A process whose parent exits at once inside pause's namespace:
	// the orphan is reparented to pause, which must collect it when it
	// exits, or it stays a zombie.
	spawn := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--pid", "--", "sh", "-c", "sleep 3 >/dev/null 2>&1 & exit 0")
	if b, err := spawn.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v %s", err, b)
	}
	waitFor(t, "the orphan to be reparented to pause", func() bool { return len(children(pid)) > 0 })
	waitFor(t, "pause to reap the orphan", func() bool { return len(children(pid)) == 0 })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pause on SIGTERM: %v (%s)", err, out.String())
	}
	if !strings.Contains(out.String(), "Shutting down, got signal: terminated") {
		t.Errorf("output %q", out.String())
	}
}
