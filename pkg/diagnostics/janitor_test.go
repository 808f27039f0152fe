package diagnostics

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	clocktesting "k8s.io/utils/clock/testing"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestJanitor: bundles, captures and GPU diagnostic outputs go 10 minutes
// after they were written, by file age
// (so also across agent restarts); working files of a dead process go at
// startup; files that are not ours stay.
func TestJanitor(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clk := clocktesting.NewFakeClock(now)
	write := func(name string, age time.Duration) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	write("nodediagnostic-a-20240612T100000Z.tar.gz", 11*time.Minute) // written before the restart, expired
	write("nodediagnostic-b-20240612T102500Z.tar.gz", 5*time.Minute)
	write(".nodediagnostic-c-20240612T102900Z.tar.gz.partial", time.Minute) // a dead process's
	if err := os.Mkdir(filepath.Join(dir, ".spool-nodediagnostic-c"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("nodediagnostic-p-20240612T100000Z.pcap.gz", 11*time.Minute) // a packet capture kept on the node, expired
	write("nodediagnostic-q-20240612T102500Z.pcap.gz", 5*time.Minute)
	if err := os.Mkdir(filepath.Join(dir, ".pcap-q-1"), 0o700); err != nil { // a dead capture's spool
		t.Fatal(err)
	}
	write("nodediagnostic-g-20240612T100000Z-gpu-diagnostic.json", 11*time.Minute) // a GPU diagnostic's output, expired
	write("nodediagnostic-h-20240612T102500Z-gpu-diagnostic.json", 5*time.Minute)  // kept across the restart
	write("agent.log", time.Hour)                                                  // not ours
	write("capture.pcap.gz", time.Hour)
	j := &janitor{dir: dir, retention: 10 * time.Minute, clock: clk, log: testr.New(t)}
	j.sweep(true)
	want := []string{"agent.log", "capture.pcap.gz", "nodediagnostic-b-20240612T102500Z.tar.gz", "nodediagnostic-h-20240612T102500Z-gpu-diagnostic.json", "nodediagnostic-q-20240612T102500Z.pcap.gz"}
	if got := entries(t, dir); !equal(got, want) {
		t.Fatalf("after startup sweep: %v, want %v", got, want)
	}

	// A running job's working directory survives periodic sweeps at any age.
	write(".nodediagnostic-d-20240612T103000Z.tar.gz.partial", time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go j.run(ctx)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(6 * time.Minute) // b is now 11 minutes old
	deadline := time.Now().Add(5 * time.Second)
	want = []string{".nodediagnostic-d-20240612T103000Z.tar.gz.partial", "agent.log", "capture.pcap.gz"}
	for !equal(entries(t, dir), want) {
		if time.Now().After(deadline) {
			t.Fatalf("after 6 more minutes: %v, want %v", entries(t, dir), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
