package custom

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// trustedDir is a directory only root can write, outside the temporary
// directory (which anybody can write, so a program there is refused): the
// checks' scripts live there. Removed at the end.
func trustedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", "nodemend-custom-test-")
	if err != nil {
		t.Fatalf("a directory only root can write: %v (these tests run as root)", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func script(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A site check in node-problem-detector's protocol, run as a real process:
// exit 0 passes, exit 1 is the problem with the first line of the output
// as its message (redacted, bounded), anything else and a timeout leave
// the state unknown, and a script others can write is not run.
func TestCheckProtocol(t *testing.T) {
	dir := trustedDir(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	red := redact.New()
	run := func(body string, mode os.FileMode, timeout time.Duration) ([]string, error) {
		t.Helper()
		p := script(t, dir, "check.sh", body, mode)
		m := New(Options{Clock: clk, Run: command.Exec{}, Redact: func(s string) string { out, _ := red.String(s); return out },
			Checks: []Check{{Reason: "CustomSiteNFSMounted", Command: []string{p, "--quick"}, Period: time.Minute, Timeout: timeout}}})
		fs, err := m.Checks()[0].Run(context.Background())
		var msgs []string
		for _, f := range fs {
			if f.Reason != "CustomSiteNFSMounted" || !f.Observed.Equal(clk.Now()) {
				t.Errorf("finding %+v", f)
			}
			msgs = append(msgs, f.Message)
		}
		return msgs, err
	}

	if fs, err := run("echo all mounted; exit 0\n", 0o755, 5*time.Second); err != nil || len(fs) != 0 {
		t.Errorf("exit 0: %q, %v", fs, err)
	}
	fs, err := run(`echo "NFS /mnt/data is stale (args: $1)"; echo second line; exit 1`+"\n", 0o755, 5*time.Second)
	if err != nil || len(fs) != 1 || fs[0] != "NFS /mnt/data is stale (args: --quick)" {
		t.Errorf("exit 1: %q, %v", fs, err)
	}
	fs, err = run("exit 1\n", 0o755, 5*time.Second)
	if err != nil || len(fs) != 1 || !strings.Contains(fs[0], "reported a problem (exit status 1) without a message") {
		t.Errorf("exit 1, silent: %q, %v", fs, err)
	}
	// A secret in the output never reaches the Node.
	fs, err = run("echo mount failed: password=hunter2hunter2 token ghp_0123456789abcdefghijABCDEFGHIJ012345; exit 1\n", 0o755, 5*time.Second)
	if err != nil || len(fs) != 1 || strings.Contains(fs[0], "hunter2hunter2") || strings.Contains(fs[0], "ghp_0123456789") {
		t.Errorf("secret in the message: %q, %v", fs, err)
	}
	// A flood of output: the message is bounded.
	fs, err = run("head -c 100000 /dev/zero | tr '\\0' x; exit 1\n", 0o755, 5*time.Second)
	if err != nil || len(fs) != 1 || len(fs[0]) > health.MaxMessageLength {
		t.Errorf("long output: %d bytes, %v", len(fs[0]), err)
	}
	for _, tc := range []struct {
		name, body string
		timeout    time.Duration
		want       string
	}{
		{"exit 2 is unknown", "echo cannot tell; exit 2\n", 5 * time.Second, "exited 2: cannot tell"},
		{"a timeout is unknown", "sleep 10\n", 200 * time.Millisecond, "did not finish within 200ms"},
	} {
		fs, err := run(tc.body, 0o755, tc.timeout)
		if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), tc.want) || len(fs) != 0 {
			t.Errorf("%s: %q, %v", tc.name, fs, err)
		}
	}
	// Writable by others: refused, never run.
	marker := filepath.Join(dir, "ran")
	_, err = run("touch "+marker+"; exit 1\n", 0o777, 5*time.Second)
	if !errors.Is(err, childproc.ErrUntrusted) {
		t.Errorf("a world-writable script: %v", err)
	}
	if _, statErr := os.Stat(marker); statErr == nil {
		t.Error("the untrusted script ran")
	}
}

// A rule's match is one finding about the line's unit or file.
func TestInterpret(t *testing.T) {
	m := New(Options{Rules: []logline.Rule{{Reason: "CustomX"}}})
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	fs := m.Interpret(logline.Match{Reason: "CustomX", Message: "m", Line: logline.Line{Source: logline.Journal, Unit: "vault-agent.service", Time: at}})
	if len(fs) != 1 || fs[0].Subject != "vault-agent.service" || !fs[0].Observed.Equal(at) || fs[0].Message != "m" {
		t.Fatalf("%+v", fs)
	}
	if m.Name() != Name || len(m.Rules()) != 1 || len(m.Checks()) != 0 {
		t.Fatal("monitor shape")
	}
}
