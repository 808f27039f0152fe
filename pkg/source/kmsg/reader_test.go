package kmsg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/logline"
)

const waitFor = 5 * time.Second

const btime = 1767225600 // 2026-01-01T00:00:00Z

// hostRoot builds a fake host root with an empty dev/kmsg file and, if
// withProc, proc/stat and proc/uptime.
func hostRoot(t *testing.T, withProc bool) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"dev", "proc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "dev", "kmsg"), "6,1,1,-;old record, before the reader started\n")
	if withProc {
		write(t, filepath.Join(root, "proc", "stat"),
			"cpu  1 2 3 4 5 6 7 0 0 0\nintr 12345 0 0 0\nctxt 999\nbtime "+fmt.Sprint(btime)+"\nprocesses 42\n")
		write(t, filepath.Join(root, "proc", "uptime"), "3600.25 7000.50\n")
	}
	return root
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

type run struct {
	t     *testing.T
	r     *Reader
	lines chan logline.Line
	errs  chan error
}

func startReader(t *testing.T, opts Options) *run {
	t.Helper()
	rn := &run{t: t, lines: make(chan logline.Line, 100), errs: make(chan error, 100)}
	opts.OnError = func(err error) { rn.errs <- err }
	opts.PollInterval = 50 * time.Millisecond
	rn.r = NewReader(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- rn.r.Run(ctx, func(l logline.Line) {
			select {
			case rn.lines <- l:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
	return rn
}

func (rn *run) next() logline.Line {
	rn.t.Helper()
	select {
	case l := <-rn.lines:
		return l
	case <-time.After(waitFor):
		rn.t.Fatal("timed out waiting for a line")
		return logline.Line{}
	}
}

// sync appends marker records until one comes out: the reader then follows
// the file's end, and what is appended next is read.
func (rn *run) sync(path string) {
	rn.t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		appendFile(rn.t, path, "7,0,0,-;sync marker\n")
		select {
		case l := <-rn.lines:
			if l.Text != "sync marker" {
				rn.t.Fatalf("got %q before the sync marker", l.Text)
			}
			// Drain markers that are still coming.
			for {
				select {
				case l := <-rn.lines:
					if l.Text != "sync marker" {
						rn.t.Fatalf("got %q among sync markers", l.Text)
					}
				case <-time.After(150 * time.Millisecond):
					return
				}
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	rn.t.Fatal("the reader never followed the file")
}

func TestRegularFile(t *testing.T) {
	root := hostRoot(t, true)
	path := filepath.Join(root, "dev", "kmsg")
	rn := startReader(t, Options{HostRoot: root})
	rn.sync(path)

	appendFile(t, path, "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"+
		"4,987,123456,-;watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"+
		"garbage\n"+
		"also garbage\n"+
		"3,988,2000000,-;EXT4-fs (nvme1n1): I/O error \\x5c\n"+
		// What `echo MSG > /dev/kmsg` and `echo "<28>MSG" > /dev/kmsg` leave:
		// the kernel forces a user-space facility (LOG_USER, or the one the
		// writer named, never 0) onto the level.
		"12,989,2500000,-;cgroup: fork rejected by pids controller in /system.slice/kubelet.service\n"+
		"28,990,2600000,-;cgroup: fork rejected by pids controller in /system.slice/containerd.service\n")
	kernel := logline.Origin{Kernel: true}
	want := []logline.Line{
		{Source: logline.Kmsg, Origin: kernel, Text: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
			Time: time.Unix(btime, 0).Add(5678901 * time.Microsecond)},
		{Source: logline.Kmsg, Origin: kernel, Text: "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]",
			Time: time.Unix(btime, 0).Add(123456 * time.Microsecond)},
		{Source: logline.Kmsg, Origin: kernel, Text: `EXT4-fs (nvme1n1): I/O error \`, Time: time.Unix(btime, 2e9)},
		{Source: logline.Kmsg, Origin: logline.Origin{Facility: 1}, Text: "cgroup: fork rejected by pids controller in /system.slice/kubelet.service",
			Time: time.Unix(btime, 25e8)},
		{Source: logline.Kmsg, Origin: logline.Origin{Facility: 3}, Text: "cgroup: fork rejected by pids controller in /system.slice/containerd.service",
			Time: time.Unix(btime, 26e8)},
	}
	for _, w := range want {
		if got := rn.next(); got != w {
			t.Fatalf("line = %+v, want %+v", got, w)
		}
	}
	select {
	case err := <-rn.errs:
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error = %v, want malformed", err)
		}
	case <-time.After(waitFor):
		t.Fatal("malformed record not reported")
	}
	select {
	case err := <-rn.errs:
		t.Fatalf("second report for consecutive malformed records: %v", err)
	default:
	}
	if s := rn.r.Stats(); s.Malformed != 2 || s.Emitted < 4 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRegularFileNoBootTime(t *testing.T) {
	root := hostRoot(t, false)
	path := filepath.Join(root, "dev", "kmsg")
	rn := startReader(t, Options{HostRoot: root})
	select {
	case err := <-rn.errs:
		if !strings.Contains(err.Error(), "boot time unknown") {
			t.Fatalf("error = %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("missing proc/stat not reported")
	}
	rn.sync(path)
	before := time.Now()
	appendFile(t, path, "6,5,999999999,-;hello\n")
	got := rn.next()
	if got.Text != "hello" || got.Time.Before(before) || got.Time.After(time.Now()) {
		t.Fatalf("line = %+v, want the read time (after %v)", got, before)
	}
}

func TestMissing(t *testing.T) {
	err := NewReader(Options{HostRoot: t.TempDir()}).Run(context.Background(), func(logline.Line) {})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Run = %v, want not-exist", err)
	}
}

// fakeDevice serves records like /dev/kmsg: one per read, EINVAL when the
// buffer is too small, scripted errors, then blocks until ctx is done.
type fakeDevice struct {
	ctx     context.Context
	mu      sync.Mutex
	items   []any // string records or errors
	seekEnd bool
}

func (d *fakeDevice) Read(p []byte) (int, error) {
	d.mu.Lock()
	if len(d.items) == 0 {
		d.mu.Unlock()
		<-d.ctx.Done()
		return 0, os.ErrDeadlineExceeded
	}
	defer d.mu.Unlock()
	switch it := d.items[0].(type) {
	case error:
		d.items = d.items[1:]
		return 0, it
	case string:
		if len(p) < len(it) {
			return 0, syscall.EINVAL
		}
		d.items = d.items[1:]
		return copy(p, it), nil
	}
	panic("bad item")
}

func (d *fakeDevice) Seek(off int64, whence int) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off != 0 || whence != io.SeekEnd {
		return 0, errors.New("unexpected seek")
	}
	d.seekEnd = true
	d.items = nil // the ring buffer's records are behind us
	return 0, nil
}

func runFake(t *testing.T, root string, opts Options, items ...any) (lines []logline.Line, errs []error, st Stats, dev *fakeDevice) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dev = &fakeDevice{ctx: ctx, items: items}
	opts.HostRoot = root
	opts.OnError = func(err error) { errs = append(errs, err) }
	r := NewReader(opts)
	r.boot = r.bootTime()
	r.emitLine = func(l logline.Line) {
		lines = append(lines, l)
	}
	done := make(chan error, 1)
	go func() { done <- r.readDevice(ctx, dev) }()
	// Wait until the fake is drained, then stop.
	deadline := time.Now().Add(waitFor)
	for {
		dev.mu.Lock()
		n := len(dev.items)
		dev.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("device not drained")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("readDevice = %v, want context.Canceled", err)
	}
	return lines, errs, r.Stats(), dev
}

func TestDeviceReplay(t *testing.T) {
	root := hostRoot(t, true) // uptime 3600.25s, default lookback 10m → cutoff 3000.25s
	big := "4,9,3500000000,-;" + strings.Repeat("x", 20<<10) + "\n"
	lines, errs, st, dev := runFake(t, root, Options{},
		"6,1,1000000,-;boot-time record, too old\n",
		"6,2,3000249999,-;just too old\n",
		"6,3,3000250000,-;just recent enough\n SUBSYSTEM=pci\n",
		syscall.EPIPE,
		"not a record\n",
		big,
		"6,10,3600300000,-;new after start\n",
	)
	if dev.seekEnd {
		t.Fatal("seeked to the end though uptime is known")
	}
	var texts []string
	for _, l := range lines {
		texts = append(texts, l.Text[:min(len(l.Text), 20)])
		if l.Source != logline.Kmsg {
			t.Fatalf("source %q", l.Source)
		}
	}
	if got, want := strings.Join(texts, "|"), "just recent enough|"+strings.Repeat("x", 20)+"|new after start"; got != want {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if want := time.Unix(btime, 0).Add(3600300 * time.Millisecond); !lines[2].Time.Equal(want) {
		t.Fatalf("time %v, want %v", lines[2].Time, want)
	}
	// The records the ring buffer held at start are the backlog (their
	// quiet period may be over); the one written after start is not.
	if !lines[0].Backlog || !lines[1].Backlog || lines[2].Backlog {
		t.Fatalf("backlog marks %v %v %v, want true true false", lines[0].Backlog, lines[1].Backlog, lines[2].Backlog)
	}
	if st != (Stats{Emitted: 3, Skipped: 2, Overwritten: 1, Malformed: 1}) {
		t.Fatalf("stats %+v", st)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrMalformed) {
		t.Fatalf("errors %v", errs)
	}
}

func TestDeviceNoReplay(t *testing.T) {
	// Lookback < 0: start at the end.
	_, _, _, dev := runFake(t, hostRoot(t, true), Options{Lookback: -1}, "6,1,1,-;old\n")
	if !dev.seekEnd {
		t.Fatal("did not seek to the end")
	}
	// No proc/uptime: start at the end, and say why.
	_, errs, _, dev := runFake(t, hostRoot(t, false), Options{}, "6,1,1,-;old\n")
	if !dev.seekEnd {
		t.Fatal("did not seek to the end without proc/uptime")
	}
	if len(errs) != 2 || !strings.Contains(errs[1].Error(), "replaying none") {
		t.Fatalf("errors %v", errs)
	}
}

func TestDeviceReadError(t *testing.T) {
	ctx := context.Background()
	r := NewReader(Options{HostRoot: hostRoot(t, true)})
	r.emitLine = func(logline.Line) {}
	dev := &fakeDevice{ctx: ctx, items: []any{syscall.EIO}}
	if err := r.readDevice(ctx, dev); !errors.Is(err, syscall.EIO) {
		t.Fatalf("readDevice = %v, want EIO", err)
	}
}

// TestRealDevice reads this machine's /dev/kmsg, whose ring buffer always
// holds records, and checks that cancelling interrupts a blocked read.
// Where the device cannot be opened (containers may hide it), the reader
// must say so at once with the open error instead of waiting for records
// that never come — the agent's behaviour on such a node.
func TestRealDevice(t *testing.T) {
	f, openErr := os.Open("/dev/kmsg")
	if openErr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		err := NewReader(Options{HostRoot: "/"}).Run(ctx, func(logline.Line) {})
		if err == nil || ctx.Err() != nil || !errors.Is(err, errors.Unwrap(openErr)) {
			t.Fatalf("/dev/kmsg unreadable (%v): Run = %v, want that error at once", openErr, err)
		}
		t.Logf("/dev/kmsg unreadable here; the reader reports it: %v", err)
		return
	}
	f.Close()
	rn := startReader(t, Options{HostRoot: "/", Lookback: 100 * 365 * 24 * time.Hour})
	l := rn.next()
	if l.Source != logline.Kmsg || l.Time.IsZero() {
		t.Fatalf("line %+v", l)
	}
	if l.Time.After(time.Now()) {
		t.Fatalf("record time %v is in the future", l.Time)
	}
	// Drain the replay so that the reader blocks in read(2); the cleanup's
	// cancel must then interrupt it.
	deadline := time.After(waitFor)
	for {
		select {
		case <-rn.lines:
			continue
		case <-time.After(300 * time.Millisecond):
		case <-deadline:
		}
		break
	}
}

// A regular file replays like the device: of the records it holds at
// start, those within Lookback of the uptime (3600 s here) come out, older
// ones do not; records appended later all come out, whatever their time.
func TestRegularFileReplay(t *testing.T) {
	root := hostRoot(t, true)
	path := filepath.Join(root, "dev", "kmsg")
	write(t, path, "4,1,2000000000,-;from 2000 s, older than the lookback\n"+
		"4,2,3500000000,-;from 3500 s, within the lookback\n SUBSYSTEM=pci\n"+
		"4,3,3590000000,-;from 3590 s, within the lookback\n")
	rn := startReader(t, Options{HostRoot: root, Lookback: 10 * time.Minute})
	rn.expectTexts("from 3500 s, within the lookback", "from 3590 s, within the lookback")
	appendFile(t, path, "4,4,5000000,-;appended, from 5 s\n")
	rn.expectTexts("appended, from 5 s")
	if s := rn.r.Stats(); s.Skipped != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func (rn *run) expectTexts(want ...string) {
	rn.t.Helper()
	for _, w := range want {
		if got := rn.next(); got.Text != w {
			rn.t.Fatalf("text %q, want %q", got.Text, w)
		}
	}
}
