package journal

// This test runs the real journalctl against a journal written by
// systemd-journal-remote. Machines that run the tests need both:
//
//	apt-get install -y systemd systemd-journal-remote
//
// (Debian/Ubuntu package names; systemd-journal-remote lives in
// /usr/lib/systemd/, not on $PATH.) Makefile/CI owner: install them before
// `go test ./...`. Without them the test fails and says so.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/logline"
)

const (
	machineID = "fedcba9876543210fedcba9876543210"
	bootID    = "0123456789abcdef0123456789abcdef"
)

func findTool(t *testing.T, name string, dirs ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not found (looked in $PATH and %v): install it with "+
		"`apt-get install -y systemd systemd-journal-remote`", name, dirs)
	return ""
}

// exportEntry is one entry in the journal export format.
type exportEntry struct {
	realtime int64 // µs since the epoch
	fields   [][2]string
}

func (e exportEntry) encode(mono int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n_BOOT_ID=%s\n_MACHINE_ID=%s\n",
		e.realtime, mono, bootID, machineID)
	for _, f := range e.fields {
		if strings.ContainsAny(f[1], "\n") || !isPrintable(f[1]) {
			// Binary field: name, newline, little-endian 64-bit size, data.
			b.WriteString(f[0] + "\n")
			binary.Write(&b, binary.LittleEndian, uint64(len(f[1])))
			b.WriteString(f[1] + "\n")
			continue
		}
		b.WriteString(f[0] + "=" + f[1] + "\n")
	}
	b.WriteString("\n")
	return b.Bytes()
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

type journalWriter struct {
	t      *testing.T
	remote string
	file   string
	mu     sync.Mutex
	mono   int64
}

// write appends entries to the journal file with systemd-journal-remote.
func (w *journalWriter) write(entries ...exportEntry) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var in bytes.Buffer
	for _, e := range entries {
		w.mono += 1000
		in.Write(e.encode(w.mono))
	}
	cmd := exec.Command(w.remote, "-o", w.file, "-")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("%s: %v: %s", w.remote, err, out)
	}
}

func msgEntry(usec int64, msg string, fields ...[2]string) exportEntry {
	return exportEntry{realtime: usec, fields: append(fields, [2]string{"MESSAGE", msg})}
}

// killableRunner is ExecRunner whose current process the test can kill.
type killableRunner struct {
	mu   sync.Mutex
	kill context.CancelFunc
}

func (k *killableRunner) Start(ctx context.Context, path string, args []string) (Process, error) {
	ctx, cancel := context.WithCancel(ctx)
	k.mu.Lock()
	k.kill = cancel
	k.mu.Unlock()
	return ExecRunner{}.Start(ctx, path, args)
}

func (k *killableRunner) killCurrent() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill()
}

func TestJournalctlIntegration(t *testing.T) {
	journalctl := findTool(t, "journalctl", "/usr/bin", "/bin")
	remote := findTool(t, "systemd-journal-remote", "/usr/lib/systemd", "/lib/systemd")

	root := t.TempDir()
	dir := filepath.Join(root, "var", "log", "journal", machineID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := &journalWriter{t: t, remote: remote, file: filepath.Join(dir, "remote.journal")}
	base := time.Now().UnixMicro()
	w.write(msgEntry(base, "before start", [2]string{"SYSLOG_IDENTIFIER", "old"}))

	runner := &killableRunner{}
	rn := startReader(t, Options{HostRoot: root, Journalctl: journalctl, Runner: runner, MinBackoff: 300 * time.Millisecond})

	// journalctl starts at the end (--lines=0): probe until it follows.
	deadline := time.Now().Add(waitFor)
probe:
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatal("journalctl never delivered a probe entry")
		}
		w.write(msgEntry(base+int64(i), fmt.Sprintf("probe %d", i)))
		select {
		case l := <-rn.lines:
			if !strings.HasPrefix(l.Text, "probe ") {
				t.Fatalf("first line %q, want a probe (entries from before the start must not come)", l.Text)
			}
			break probe
		case err := <-rn.errs:
			t.Fatalf("reader error: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	drain(rn, "probe ")

	at := func(usec int64) time.Time { return time.UnixMicro(usec) }
	w.write(
		msgEntry(base+1_000_001, `E0101 00:00:01.234567    1234 kubelet.go:2412] "Container runtime network not ready"`,
			[2]string{"_SYSTEMD_UNIT", "kubelet.service"}, [2]string{"SYSLOG_IDENTIFIER", "kubelet"},
			[2]string{"_TRANSPORT", "stdout"}, [2]string{"_PID", "1234"}, [2]string{"_UID", "0"}, [2]string{"_COMM", "kubelet"}),
		msgEntry(base+1_000_002, "kubelet.service: Failed with result 'exit-code'.",
			[2]string{"_SYSTEMD_UNIT", "init.scope"}, [2]string{"UNIT", "kubelet.service"}, [2]string{"SYSLOG_IDENTIFIER", "systemd"},
			[2]string{"_TRANSPORT", "journal"}, [2]string{"_PID", "1"}, [2]string{"_UID", "0"}, [2]string{"_COMM", "systemd"}),
		msgEntry(base+1_000_003, "binary \xff\x01\nsecond line", [2]string{"SYSLOG_IDENTIFIER", "app"}),
		// logger -t kubelet from a user's session: the identifier is a claim.
		msgEntry(base+1_000_004, "fork/exec /usr/bin/mount: resource temporarily unavailable",
			[2]string{"SYSLOG_IDENTIFIER", "kubelet"}, [2]string{"_TRANSPORT", "syslog"}, [2]string{"_PID", "4242"},
			[2]string{"_UID", "1000"}, [2]string{"_COMM", "logger"}, [2]string{"_SYSTEMD_UNIT", "session-3.scope"}),
		// The kernel's own record, and one written to /dev/kmsg from user space.
		msgEntry(base+1_000_005, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service",
			[2]string{"_TRANSPORT", "kernel"}, [2]string{"SYSLOG_FACILITY", "0"}, [2]string{"SYSLOG_IDENTIFIER", "kernel"}),
		msgEntry(base+1_000_006, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service",
			[2]string{"_TRANSPORT", "kernel"}, [2]string{"SYSLOG_FACILITY", "1"}, [2]string{"SYSLOG_IDENTIFIER", "kernel"}),
	)
	for _, want := range []logline.Line{
		{Source: logline.Journal, Unit: "kubelet.service", Time: at(base + 1_000_001),
			Origin: logline.Origin{Root: true, Transport: "stdout", PID: "1234", UID: "0", Comm: "kubelet"},
			Text:   `E0101 00:00:01.234567    1234 kubelet.go:2412] "Container runtime network not ready"`},
		{Source: logline.Journal, Unit: "kubelet.service", Time: at(base + 1_000_002),
			Origin: logline.Origin{Manager: true, Root: true, Transport: "journal", PID: "1", UID: "0", Comm: "systemd"},
			Text:   "kubelet.service: Failed with result 'exit-code'."},
		{Source: logline.Journal, Time: at(base + 1_000_003), Text: "binary \uFFFD\x01\nsecond line"},
		{Source: logline.Journal, Unit: "session-3.scope", Time: at(base + 1_000_004),
			Origin: logline.Origin{Transport: "syslog", PID: "4242", UID: "1000", Comm: "logger"},
			Text:   "fork/exec /usr/bin/mount: resource temporarily unavailable"},
		{Source: logline.Journal, Time: at(base + 1_000_005), Origin: logline.Origin{Kernel: true, Transport: "kernel"},
			Text: "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"},
		{Source: logline.Journal, Time: at(base + 1_000_006), Origin: logline.Origin{Transport: "kernel", Facility: 1},
			Text: "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"},
	} {
		if got := rn.next(); got != want {
			t.Fatalf("line\n%+v, want\n%+v", got, want)
		}
	}

	// Kill journalctl; what is written while it is down comes after the
	// restart, once, thanks to the cursor.
	runner.killCurrent()
	select {
	case err := <-rn.errs:
		if !strings.Contains(err.Error(), "restarting") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("exit not reported")
	}
	w.write(msgEntry(base+2_000_000, "while down", [2]string{"SYSLOG_IDENTIFIER", "app"}))
	if got := rn.next(); got.Text != "while down" {
		t.Fatalf("after the restart: %q, want %q", got.Text, "while down")
	}
	select {
	case l := <-rn.lines:
		t.Fatalf("unexpected line after the restart: %q", l.Text)
	case <-time.After(300 * time.Millisecond):
	}
	if st := rn.r.Stats(); st.Restarts != 1 || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// drain reads lines with the given prefix until none comes for a while.
func drain(rn *run, prefix string) {
	rn.t.Helper()
	for {
		select {
		case l := <-rn.lines:
			if !strings.HasPrefix(l.Text, prefix) {
				rn.t.Fatalf("line %q while draining %q lines", l.Text, prefix)
			}
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
}
