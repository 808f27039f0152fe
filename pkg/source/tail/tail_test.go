package tail

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const waitFor = 5 * time.Second

type harness struct {
	t     *testing.T
	lines chan string
	errs  chan error
	opens chan int64
	done  chan error
}

// start runs Follow in the background until the test ends.
func start(t *testing.T, path string, opts Options) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		lines: make(chan string, 1024),
		errs:  make(chan error, 64),
		opens: make(chan int64, 64),
		done:  make(chan error, 1),
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	opts.OnError = func(err error) { h.errs <- err }
	opts.OnOpen = func(off int64) { h.opens <- off }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		h.done <- Follow(ctx, path, opts, func(line []byte, at time.Time) {
			if at.IsZero() {
				t.Errorf("zero read time for %q", line)
			}
			h.lines <- string(line)
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Follow returned %v, want context.Canceled", err)
			}
		case <-time.After(waitFor):
			t.Errorf("Follow did not return after cancel")
		}
	})
	return h
}

func (h *harness) expect(want ...string) {
	h.t.Helper()
	for _, w := range want {
		select {
		case got := <-h.lines:
			if got != w {
				h.t.Fatalf("line = %q, want %q", trunc(got), trunc(w))
			}
		case <-time.After(waitFor):
			h.t.Fatalf("timed out waiting for line %q", trunc(w))
		}
	}
}

// expectNone checks that no line arrives within d.
func (h *harness) expectNone(d time.Duration) {
	h.t.Helper()
	select {
	case got := <-h.lines:
		h.t.Fatalf("unexpected line %q", trunc(got))
	case <-time.After(d):
	}
}

func (h *harness) waitOpen() int64 {
	h.t.Helper()
	select {
	case off := <-h.opens:
		return off
	case <-time.After(waitFor):
		h.t.Fatal("timed out waiting for the file to be opened")
		return 0
	}
}

func (h *harness) waitErr() error {
	h.t.Helper()
	select {
	case err := <-h.errs:
		return err
	case <-time.After(waitFor):
		h.t.Fatal("timed out waiting for an error report")
		return nil
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendFromEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "old 1\nold 2\n")
	h := start(t, path, Options{})
	if off := h.waitOpen(); off != 12 {
		t.Fatalf("opened at %d, want 12 (the end)", off)
	}
	appendFile(t, path, "new 1\n")
	h.expect("new 1")
	appendFile(t, path, "new 2\nnew 3\n")
	h.expect("new 2", "new 3")
}

func TestFromStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "old 1\nold 2\n")
	h := start(t, path, Options{FromStart: true})
	h.expect("old 1", "old 2")
	appendFile(t, path, "new\n")
	h.expect("new")
}

// TestNotifyWakesUp checks that fsnotify, not polling, delivers lines.
func TestNotifyWakesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{PollInterval: time.Hour})
	h.waitOpen()
	appendFile(t, path, "a\n")
	h.expect("a")
	appendFile(t, path, "b\n")
	h.expect("b")
}

// TestPollOnly checks the fallback when fsnotify is off.
func TestPollOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{DisableNotify: true, PollInterval: 20 * time.Millisecond})
	h.waitOpen()
	appendFile(t, path, "a\n")
	h.expect("a")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "b\n")
	h.waitOpen()
	h.expect("b")
}

func TestSplitAcrossWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{})
	h.waitOpen()
	appendFile(t, path, "hel")
	h.expectNone(150 * time.Millisecond) // a partial line is held
	appendFile(t, path, "lo\nwor")
	h.expect("hello")
	h.expectNone(150 * time.Millisecond)
	appendFile(t, path, "ld\n\n")
	h.expect("world", "")
}

func TestRotateRenameCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{RotateGrace: 1500 * time.Millisecond})
	h.waitOpen()
	appendFile(t, path, "before\n")
	h.expect("before")

	// The writer goes on writing to the renamed file for a while, as
	// applications do until they are told to reopen their log.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path+".1", "late old\n")
	appendFile(t, path, "new 1\nnew 2\n")
	if off := h.waitOpen(); off != 0 {
		t.Fatalf("new file opened at %d, want 0", off)
	}
	h.expect("late old", "new 1", "new 2")
	appendFile(t, path+".1", "later old\npartial old")
	h.expect("later old")
	// The old file's partial line comes when its grace ends.
	h.expect("partial old")
	appendFile(t, path+".1", "too late\n")
	appendFile(t, path, "new 3\n")
	h.expect("new 3")
	h.expectNone(100 * time.Millisecond)
	select {
	case err := <-h.errs:
		t.Fatalf("rotation reported an error: %v", err)
	default:
	}
}

func TestCopyTruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{})
	h.waitOpen()
	appendFile(t, path, "a fairly long line before the rotation\n")
	h.expect("a fairly long line before the rotation")

	// copytruncate: copy, then truncate in place (same inode).
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".1", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "after\n")
	h.expect("after")
	appendFile(t, path, "after 2\n")
	h.expect("after 2")
}

func TestDeleteRecreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{RotateGrace: time.Second})
	h.waitOpen()
	appendFile(t, path, "one\n")
	h.expect("one")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// Still read during its grace, though deleted.
	if _, err := f.WriteString("deleted but written\n"); err != nil {
		t.Fatal(err)
	}
	h.expect("deleted but written")
	// Reported once the grace is over and the path is still missing.
	if err := h.waitErr(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error = %v, want not-exist", err)
	}
	appendFile(t, path, "two\n")
	if off := h.waitOpen(); off != 0 {
		t.Fatalf("recreated file opened at %d, want 0", off)
	}
	h.expect("two")
}

func TestMissingThenCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later") // the directory is missing too
	path := filepath.Join(dir, "app.log")
	h := start(t, path, Options{PollInterval: 10 * time.Millisecond, RotateGrace: -1})
	if err := h.waitErr(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error = %v, want not-exist", err)
	}
	// Many polls fail, yet no further report.
	select {
	case err := <-h.errs:
		t.Fatalf("second report while still missing: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "first\nsecond\n")
	if off := h.waitOpen(); off != 0 {
		t.Fatalf("file created later opened at %d, want 0", off)
	}
	h.expect("first", "second")
	appendFile(t, path, "third\n")
	h.expect("third")

	// Recovered, then failing anew: reported again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := h.waitErr(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error = %v, want not-exist", err)
	}
}

func TestLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	appendFile(t, path, "")
	h := start(t, path, Options{})
	h.waitOpen()
	long := strings.Repeat("x", 1<<20)
	appendFile(t, path, long+"\nnext\n")
	h.expect(long[:DefaultMaxLineBytes], "next")

	// A long line written in pieces, and one of exactly the limit.
	for range 20 {
		appendFile(t, path, strings.Repeat("y", 10000))
	}
	appendFile(t, path, "\n"+strings.Repeat("z", DefaultMaxLineBytes)+"\nend\n")
	h.expect(strings.Repeat("y", DefaultMaxLineBytes), strings.Repeat("z", DefaultMaxLineBytes), "end")
}

// TestSplitterBounded checks the line splitter directly: a huge line fed in
// chunks is cut at max and costs no allocation per chunk.
func TestSplitterBounded(t *testing.T) {
	var got []string
	s := splitter{max: 8, emit: func(b []byte, _ time.Time) { got = append(got, string(b)) }}
	now := time.Now()
	for _, chunk := range []string{"abc", "defghij", "klm\nshort\n", "12345678", "\n", "123456789\n", "tail"} {
		s.write([]byte(chunk), now)
	}
	want := []string{"abcdefgh", "short", "12345678", "12345678"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	s.flush()
	if got[len(got)-1] != "tail" {
		t.Fatalf("flush emitted %q, want %q", got[len(got)-1], "tail")
	}

	chunk := bytes.Repeat([]byte("q"), 4096)
	big := splitter{max: DefaultMaxLineBytes, emit: func([]byte, time.Time) {}}
	nl := []byte("\n")
	big.write(chunk, now) // warm up the held buffer
	allocs := testing.AllocsPerRun(100, func() {
		for range 256 { // 1 MiB
			big.write(chunk, now)
		}
		big.write(nl, now)
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per 1 MiB line, want 0", allocs)
	}
}

func BenchmarkFollow(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.log")
	line := "I0101 12:00:00.000000    1234 kubelet.go:2345] SyncLoop (PLEG): event for pod \"default/web-0\"\n"
	var buf bytes.Buffer
	for range b.N {
		buf.WriteString(line)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	start := time.Now()
	err := Follow(ctx, path, Options{FromStart: true}, func([]byte, time.Time) {
		if n++; n == b.N {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lines/s")
}
