package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
)

func TestWriteProbeWritesOnlyItsDirectory(t *testing.T) {
	root := hostroot.New(t)
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	for range 3 {
		if fs, err := runCheck(t, m, "storage-write-probe"); err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
	// The probe directory is the only thing it leaves: empty, mode 0700.
	var paths []string
	_ = filepath.Walk(root.Dir, func(p string, info os.FileInfo, err error) error {
		if p != root.Dir {
			rel, _ := filepath.Rel(root.Dir, p)
			paths = append(paths, rel)
		}
		return nil
	})
	if strings.Join(paths, ",") != "var,var/lib,var/lib/nodemend,var/lib/nodemend/probe" {
		t.Fatalf("the probe left %v", paths)
	}
	fi, err := os.Stat(root.Path("var/lib/nodemend/probe"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%v %v", fi.Mode(), err)
	}
}

// mountTmpfs mounts a tmpfs at dir with opts; the test fails where
// mounting is not allowed (not root).
func mountTmpfs(t *testing.T, dir string, flags uintptr, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		t.Fatalf("cannot mount a tmpfs: %v (these tests run as root, as make test and CI do)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// TestWriteProbeRealReadOnlyFilesystem: the probe directory's filesystem
// is really read-only (a tmpfs mounted ro, then remounted rw): the kernel's
// EROFS makes FilesystemNotWritable after two probes, and the remount
// clears it.
func TestWriteProbeRealReadOnlyFilesystem(t *testing.T) {
	root := hostroot.New(t)
	dir := root.Path("var/lib/nodemend")
	mountTmpfs(t, dir, unix.MS_RDONLY, "size=64k")
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{})
	check := monitortest.Stepper(t, m, "storage-write-probe", clk, 30*time.Second)
	check("")
	check("FilesystemNotWritable//var/lib/nodemend/probe")
	fs, _ := runCheck(t, m, "storage-write-probe")
	if want := "cannot write and fsync a file in /var/lib/nodemend/probe since 2026-03-14T09:26:53Z (at least 2 consecutive probes): read-only file system"; fs[0].Message != want {
		t.Fatalf("message %q", fs[0].Message)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=64k"); err != nil {
		t.Fatal(err)
	}
	check("")
}

// TestWriteProbeAgentOnlyReadOnlyMount: the host directory reaches the
// agent through a bind mount made read-only (a DaemonSet's readOnly
// hostPath): the superblock is writable, so EROFS is the deployment's
// mistake, reported as the check's error, never as the host's fault.
func TestWriteProbeAgentOnlyReadOnlyMount(t *testing.T) {
	root := hostroot.New(t)
	host := t.TempDir() // the "host's" /var/lib/nodemend, on a writable filesystem
	dir := root.Path("var/lib/nodemend")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(host, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("cannot bind mount: %v (these tests run as root, as make test and CI do)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	for range 3 {
		fs, err := runCheck(t, m, "storage-write-probe")
		if len(fs) != 0 || err == nil || !strings.Contains(err.Error(), "read-only for the agent only") {
			t.Fatalf("%v, %v", fs, err)
		}
	}
}

// TestWriteProbeFullDiskIsNotThisFault fills a real tiny tmpfs: ENOSPC is
// FilesystemNearFull's business, not a filesystem that refuses writes.
func TestWriteProbeFullDiskIsNotThisFault(t *testing.T) {
	root := hostroot.New(t)
	dir := root.Path("var/lib/nodemend")
	mountTmpfs(t, dir, 0, "size=16k")
	if err := os.MkdirAll(filepath.Join(dir, "probe"), 0o700); err != nil {
		t.Fatal(err)
	}
	filler, _ := os.Create(filepath.Join(dir, "filler"))
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	m := New(testEnv(root, clocktesting.NewFakePassiveClock(t0), nil), Options{})
	for range 3 {
		if fs, err := runCheck(t, m, "storage-write-probe"); err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
}

// TestHungWriteProbe uses a blocking fake for a write that never returns
// (a disk that stopped completing I/O): each check returns within the
// probe timeout, no second probe starts while the first hangs, the hang is
// itself the finding, and a probe that finally returns clears it.
func TestHungWriteProbe(t *testing.T) {
	root := hostroot.New(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{ProbeTimeout: 100 * time.Millisecond})
	release := make(chan struct{})
	var calls atomic.Int32
	m.writeProbe = func(dir string) error {
		calls.Add(1)
		<-release
		return nil
	}
	var msgs []string
	for i := range 4 {
		start := time.Now()
		fs, err := runCheck(t, m, "storage-write-probe")
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("check %d took %v", i, d)
		}
		if (len(fs) == 1) != (i >= 1) {
			t.Fatalf("check %d: %v", i, fs)
		}
		if len(fs) == 1 {
			msgs = append(msgs, fs[0].Message)
		}
		clk.SetTime(clk.Now().Add(30 * time.Second))
	}
	if calls.Load() != 1 {
		t.Fatalf("%d probes started while the first hangs", calls.Load())
	}
	if msgs[0] != msgs[1] || msgs[1] != msgs[2] || !strings.Contains(msgs[0], "the write and fsync have not returned since") {
		t.Fatalf("messages %q", msgs)
	}
	close(release)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if busy, _ := m.probeGuard.Busy(); !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("probe still busy")
		}
	}
	if fs, err := runCheck(t, m, "storage-write-probe"); err != nil || len(fs) != 0 {
		t.Fatalf("after the probe returned: %v, %v", fs, err)
	}
}

func TestClassifyProbe(t *testing.T) {
	pathErr := func(errno unix.Errno) error { return &os.PathError{Op: "open", Path: "/x", Err: errno} }
	for _, tc := range []struct {
		err     error
		want    probeOutcome
		detail  string
		wantErr bool
	}{
		{nil, probeOK, "", false},
		{pathErr(unix.EROFS), probeFault, "read-only file system", false},
		{pathErr(unix.EIO), probeFault, "input/output error", false},
		{pathErr(unix.EUCLEAN), probeFault, "structure needs cleaning", false},
		{pathErr(unix.ENOSPC), probeFull, "", false},
		{pathErr(unix.EDQUOT), probeFull, "", false},
		{pathErr(unix.EACCES), probeOK, "", true},
		{pathErr(unix.ENOTDIR), probeOK, "", true},
		{&bounded.StuckError{What: "w", Since: t0}, probeHung, "have not returned since 2026-03-14T09:26:53Z (timeout 10s)", false},
	} {
		o, detail, err := classifyProbe(tc.err, 10*time.Second)
		if o != tc.want || (err != nil) != tc.wantErr || !strings.Contains(detail, tc.detail) {
			t.Errorf("%v: %v %q %v", tc.err, o, detail, err)
		}
	}
	if !errors.Is(pathErr(unix.EROFS), unix.EROFS) {
		t.Fatal("errno wrapping")
	}
}

// TestHungProbeOnACongestedDeviceIsNotAFault: a probe that hangs while the
// probe directory's device keeps completing I/O is behind a workload's
// writeback (any pod that writes enough can cause it), not on a dead disk:
// no FilesystemNotWritable however long it lasts. When the device stops
// completing requests, two checks without progress make the finding, and
// its message says so.
func TestHungProbeOnACongestedDeviceIsNotAFault(t *testing.T) {
	root := hostroot.New(t).WithMounts()
	// The root filesystem (259:1, nvme0n1p1) holds /var/lib/nodemend/probe.
	statFile := "sys/dev/block/259:1/stat"
	completed := uint64(1000)
	writeStat := func() {
		// Linux 5.5+: 17 fields; reads 1, writes 5, flushes 16.
		root.WriteFile(statFile, fmt.Sprintf("%8d 0 2000 300 %8d 0 9000 4000 1 5000 9000 0 0 0 0 %d 70\n", completed, completed*2, completed/10))
	}
	writeStat()
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{ProbeTimeout: 50 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	m.writeProbe = func(string) error { <-release; return nil }
	run := func() []string {
		t.Helper()
		fs, err := runCheck(t, m, "storage-write-probe")
		if err != nil {
			t.Fatal(err)
		}
		clk.SetTime(clk.Now().Add(30 * time.Second))
		var got []string
		for _, f := range fs {
			got = append(got, f.Message)
		}
		return got
	}
	for i := range 6 {
		if fs := run(); len(fs) != 0 {
			t.Fatalf("check %d, device completing I/O: %q", i, fs)
		}
		completed += 37
		writeStat()
	}
	// The device stops: the first check still sees the last progress, the
	// next two see none.
	run()
	if fs := run(); len(fs) != 0 {
		t.Fatalf("one check without progress: %q", fs)
	}
	fs := run()
	if len(fs) != 1 || !strings.Contains(fs[0], "the write and fsync have not returned since") ||
		!strings.Contains(fs[0], "and its device completed no I/O since the last check") {
		t.Fatalf("device stopped: %q", fs)
	}
}

func TestParseCompletedIOs(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		err        bool
	}{
		{"before 4.18: 11 fields", "  193 0 3924 88 27 12 320 19 0 96 107\n", 193 + 27, false},
		{"4.18 to 5.4: 15 fields, discards", "193 0 3924 88 27 12 320 19 0 96 107 3 0 24 1\n", 193 + 27, false},
		{"5.5 and later: 17 fields, flushes", "193 0 3924 88 27 12 320 19 0 96 107 3 0 24 1 40 5\n", 193 + 27 + 40, false},
		{"too short", "1 2 3\n", 0, true},
		{"not a number", "x 0 3924 88 27 12 320 19 0 96 107\n", 0, true},
	} {
		got, err := parseCompletedIOs([]byte(tc.stat))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %d, %v", tc.name, got, err)
		}
	}
}
