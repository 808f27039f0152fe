package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/hostileconfig"
	"nodemend.dev/nodemend/pkg/health"
)

func TestHostileConfigsAreRefused(t *testing.T) {
	for _, tc := range hostileconfig.Hostile() {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := Parse([]byte(tc.Data))
			if err == nil || !strings.Contains(err.Error(), tc.Want) || !strings.HasPrefix(err.Error(), "invalid agent config: ") {
				t.Fatalf("got %v, want an invalid agent config error with %q", err, tc.Want)
			}
		})
	}
}

// Refusing a hostile document costs a bounded amount of memory whatever it
// would expand to: every one allocates less than 8 MiB in all, a few
// times the 1 MiB the file may have (the largest cost is a 1 MiB string,
// which the YAML scanner copies while it grows it). Measured as bytes
// allocated, which does not depend on the machine's speed or the garbage
// collector; BenchmarkHostileConfigReload (cmd/nodemend-agent) measures
// the real agent's resident memory.
func TestHostileConfigsCostLittle(t *testing.T) {
	const budget = 8 << 20
	for _, tc := range hostileconfig.Hostile() {
		name, data := tc.Name, []byte(tc.Data)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Parse(data)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
		got := after.TotalAlloc - before.TotalAlloc
		if got > budget {
			t.Errorf("%s: refusing it allocated %.1f MiB, more than %d MiB", name, float64(got)/(1<<20), budget>>20)
		}
		t.Logf("%-26s %7d bytes, refused with %.2f MiB allocated", name, len(data), float64(got)/(1<<20))
	}
}

// What an operator writes stays well inside the limits: every reason
// overridden with every field, comments included.
func TestLargestRealisticConfigIsAccepted(t *testing.T) {
	var b strings.Builder
	b.WriteString("# nodemend agent config: every reason overridden, for the limits test.\n")
	b.WriteString("monitors:\n  kernel: {enabled: true, checkInterval: 30s}\n  storage:\n    filesystems: [/, /var/lib/kubelet, /var/lib/containerd, /data]\n")
	b.WriteString("reasons:\n")
	n := 0
	for _, name := range reasonNames() {
		fmt.Fprintf(&b, "  # %s: lowered to Info on this fleet, with a longer quiet period — see the runbook.\n", name)
		fmt.Fprintf(&b, "  %s:\n    severity: Info\n", name)
		n++
	}
	if _, err := Parse([]byte(b.String())); err != nil {
		t.Fatalf("a config overriding all %d reasons: %v", n, err)
	}
	if s := structureBytes([]byte(b.String())); s > MaxStructure/4 {
		t.Errorf("the largest realistic config already counts %d of the %d structure bytes", s, MaxStructure)
	}
}

// The file is refused from its size, before it is read: a 100 MB file
// (sparse, so the test writes nothing) costs nothing to refuse.
func TestReadFileRefusesLargeFilesWithoutReadingThem(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = ReadFile(big)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "104857600 bytes, more than the limit of 1048576 (1 MiB)") {
		t.Fatalf("100 MB file: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("refusing it allocated %d bytes", got)
	}

	exact := filepath.Join(dir, "exact.yaml")
	if err := os.WriteFile(exact, []byte("#"+strings.Repeat("x", MaxFileBytes-2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := ReadFile(exact)
	if err != nil || len(data) != MaxFileBytes {
		t.Fatalf("a file of exactly 1 MiB: %d bytes, %v", len(data), err)
	}
	if _, err := Parse(data); err != nil {
		t.Errorf("a 1 MiB file of one comment: %v", err)
	}
	if err := os.WriteFile(exact, []byte("#"+strings.Repeat("x", MaxFileBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(exact); !errors.Is(err, ErrTooLarge) {
		t.Errorf("1 MiB + 1 byte: %v", err)
	}
}

// A FIFO (or a device) at the config path would block the reader, or
// never end: it is refused at once.
func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "agent.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("FIFO: %v", err)
	}
	if _, err := ReadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("/dev/zero: %v", err)
	}
}

// Through a symlink (a mounted ConfigMap is one) the file is read.
func TestReadFileFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "..data")
	if err := os.WriteFile(target, []byte("monitors: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "agent.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(link); err != nil || string(data) != "monitors: {}\n" {
		t.Fatalf("%q %v", data, err)
	}
}

func reasonNames() []string {
	var names []string
	for _, r := range health.Reasons() {
		names = append(names, r.Name)
	}
	return names
}

func TestCorpusSizesAreTheLimits(t *testing.T) {
	if hostileconfig.MiB != MaxFileBytes {
		t.Fatalf("hostileconfig.MiB = %d, MaxFileBytes = %d", hostileconfig.MiB, MaxFileBytes)
	}
}
