package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// startScheduler runs the real kube-scheduler (v1.37.2, built with the
// control plane by hack/kube-binaries.sh) against the test API server, so
// that FailedScheduling events are the scheduler's own, verbatim. It is
// stopped when the test ends.
func startScheduler(t *testing.T) {
	t.Helper()
	dir, err := testenv.BinaryDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: build it with `hack/kube-binaries.sh kube-scheduler`", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--kubeconfig", kubeconfig(t, cfg),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	)
	logs, err := os.Create(filepath.Join(t.TempDir(), "kube-scheduler.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("kube-scheduler log tail:\n%s", b)
		}
		logs.Close()
	})
}
