package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/logline"
)

const waitFor = 10 * time.Second

type run struct {
	t     *testing.T
	r     *Reader
	lines chan logline.Line
	errs  chan error
}

func startReader(t *testing.T, opts Options) *run {
	t.Helper()
	rn := &run{t: t, lines: make(chan logline.Line, 100), errs: make(chan error, 100)}
	opts.OnError = func(err error) {
		select {
		case rn.errs <- err:
		default:
		}
	}
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

func (rn *run) expectTexts(want ...string) {
	rn.t.Helper()
	for _, w := range want {
		if got := rn.next(); got.Text != w {
			rn.t.Fatalf("text %q, want %q", got.Text, w)
		}
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

const marker = `{"__REALTIME_TIMESTAMP":"1","MESSAGE":"sync marker"}` + "\n"

// syncFile appends marker entries until one comes out: the reader then
// follows the file's end.
func (rn *run) syncFile(path string) {
	rn.t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		appendFile(rn.t, path, marker)
		select {
		case <-rn.lines:
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

func TestFileMode(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var", "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "var", "log", "journal.jsonl")
	appendFile(t, path, kubeletEntry+"\n") // before the start: not read
	rn := startReader(t, Options{HostRoot: root, File: "var/log/journal.jsonl", PollInterval: 50 * time.Millisecond})
	rn.syncFile(path)
	appendFile(t, path, unitFailedEntry+"\n{broken\n"+"\n"+binaryEntry+"\n")
	if got := rn.next(); got.Unit != "kubelet.service" || got.Text != "kubelet.service: Failed with result 'exit-code'." {
		t.Fatalf("line %+v", got)
	}
	rn.expectTexts("bad \uFFFD\nnext")
	select {
	case err := <-rn.errs:
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("malformed entry not reported")
	}
	if st := rn.r.Stats(); st.Malformed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestArgs(t *testing.T) {
	base := []string{"--output=json", "--all", "--follow", "--no-pager", "--quiet", "--output-fields=" + outputFields}
	for _, tt := range []struct {
		opts   Options
		cursor string
		extra  []string
	}{
		{Options{}, "", []string{"--lines=0"}},
		{Options{HostRoot: "/"}, "", []string{"--lines=0"}},
		{Options{HostRoot: "/host"}, "", []string{"--lines=0", "--root=/host"}},
		{Options{HostRoot: "/host", Directory: "var/log/journal"}, "c1", []string{"--after-cursor=c1", "--directory=/host/var/log/journal"}},
	} {
		r := NewReader(tt.opts)
		r.cursor = tt.cursor
		if got, want := r.args(), append(slices.Clone(base), tt.extra...); !slices.Equal(got, want) {
			t.Errorf("%+v: args %q, want %q", tt.opts, got, want)
		}
	}
}

// fakeRunner hands out scripted processes and records the arguments.
type fakeRunner struct {
	mu     sync.Mutex
	starts [][]string
	times  []time.Time
	procs  []func(ctx context.Context) (*fakeProc, error) // one per start; the last repeats
}

func (f *fakeRunner) Start(ctx context.Context, path string, args []string) (Process, error) {
	f.mu.Lock()
	i := min(len(f.starts), len(f.procs)-1)
	f.starts = append(f.starts, args)
	f.times = append(f.times, time.Now())
	mk := f.procs[i]
	f.mu.Unlock()
	p, err := mk(ctx)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (f *fakeRunner) started() ([][]string, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts), slices.Clone(f.times)
}

type fakeProc struct {
	out  io.Reader
	wait func() error
}

func (p *fakeProc) Stdout() io.Reader { return p.out }
func (p *fakeProc) Wait() error       { return p.wait() }

// exits writes out and exits with err.
func exits(out string, err error) func(context.Context) (*fakeProc, error) {
	return func(context.Context) (*fakeProc, error) {
		return &fakeProc{out: strings.NewReader(out), wait: func() error { return err }}, nil
	}
}

// follows writes out, then runs until killed, like journalctl --follow.
func follows(out string) func(context.Context) (*fakeProc, error) {
	return func(ctx context.Context) (*fakeProc, error) {
		pr, pw := io.Pipe()
		go func() {
			io.WriteString(pw, out)
			<-ctx.Done()
			pw.Close()
		}()
		return &fakeProc{out: pr, wait: func() error { return errors.New("signal: killed") }}, nil
	}
}

func TestRestartResumesAfterCursor(t *testing.T) {
	fr := &fakeRunner{procs: []func(context.Context) (*fakeProc, error){
		exits(kubeletEntry+"\n"+containerdEntry+"\n", errors.New("exit status 1: Failed to iterate through journal")),
		follows(unitFailedEntry + "\n"),
	}}
	rn := startReader(t, Options{Runner: fr, Journalctl: "/usr/bin/journalctl", MinBackoff: 10 * time.Millisecond})
	rn.expectTexts(
		`E0101 00:00:01.234567    1234 kubelet.go:2412] "Container runtime network not ready" networkReady="NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"`)
	if l := rn.next(); l.Unit != "containerd.service" {
		t.Fatalf("line %+v", l)
	}
	if l := rn.next(); l.Text != "kubelet.service: Failed with result 'exit-code'." {
		t.Fatalf("line %+v", l)
	}
	select {
	case err := <-rn.errs:
		if !strings.Contains(err.Error(), "Failed to iterate through journal") || !strings.Contains(err.Error(), "restarting in 10ms") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("exit not reported")
	}
	starts, _ := fr.started()
	if len(starts) != 2 {
		t.Fatalf("%d starts, want 2", len(starts))
	}
	if !slices.Contains(starts[0], "--lines=0") {
		t.Fatalf("first start %q lacks --lines=0", starts[0])
	}
	if !slices.Contains(starts[1], "--after-cursor=s=1c0ffee;i=2a2") || slices.Contains(starts[1], "--lines=0") {
		t.Fatalf("restart %q does not resume after the last cursor", starts[1])
	}
	if st := rn.r.Stats(); st.Restarts != 1 || st.Emitted != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBackoff(t *testing.T) {
	fr := &fakeRunner{procs: []func(context.Context) (*fakeProc, error){
		func(context.Context) (*fakeProc, error) { return nil, errors.New("exec: journalctl: not found") },
	}}
	startReader(t, Options{Runner: fr, MinBackoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	deadline := time.Now().Add(waitFor)
	var times []time.Time
	for time.Now().Before(deadline) {
		if _, times = fr.started(); len(times) >= 6 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(times) < 6 {
		t.Fatalf("only %d starts", len(times))
	}
	// Gaps at least 20, 40, 80, 80, 80 ms (lower bounds only: the machine may
	// be slow).
	for i, min := range []time.Duration{20, 40, 80, 80, 80} {
		if gap := times[i+1].Sub(times[i]); gap < min*time.Millisecond {
			t.Fatalf("gap %d = %v, want at least %vms", i, gap, min)
		}
	}
}

// TestExecRunner runs a stand-in script through the real process handling.
func TestExecRunner(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "journalctl")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+
		"for a in \"$@\"; do echo \"$a\" >> \""+dir+"/args\"; done\n"+
		"echo 'No journal files were found.' >&2\n"+
		"echo '"+kernelEntry+"'\n"+
		"exec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := ExecRunner{}.Start(ctx, script, []string{"--follow", "--lines=0"})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(p.Stdout(), buf, len(kernelEntry)+1)
		lines <- string(buf[:n])
		io.Copy(io.Discard, p.Stdout())
		done <- p.Wait()
	}()
	select {
	case got := <-lines:
		if got != kernelEntry+"\n" {
			t.Fatalf("stdout %q", got)
		}
	case <-time.After(waitFor):
		t.Fatal("no output")
	}
	cancel() // kills the process
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "No journal files were found.") {
			t.Fatalf("Wait = %v, want the kill with stderr", err)
		}
	case <-time.After(waitFor):
		t.Fatal("process not killed on cancel")
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil || string(args) != "--follow\n--lines=0\n" {
		t.Fatalf("args %q, %v", args, err)
	}
}

// With a Lookback, the entries of the last Lookback before the start are
// read again, marked Replayed, older ones not at all, and those written
// after the start are new: a file from its start, journalctl --since.
func TestLookbackReplaysTheRecentPast(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var", "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	entry := func(at time.Time, msg string) string {
		return fmt.Sprintf(`{"__REALTIME_TIMESTAMP":"%d","_SYSTEMD_UNIT":"vault-agent.service","MESSAGE":%q}`+"\n", at.UnixMicro(), msg)
	}
	path := filepath.Join(root, "var", "log", "journal.jsonl")
	appendFile(t, path, entry(now.Add(-20*time.Minute), "too old")+entry(now.Add(-5*time.Minute), "recent")+entry(now.Add(-time.Minute), "more recent"))
	rn := startReader(t, Options{HostRoot: root, File: "var/log/journal.jsonl", PollInterval: 50 * time.Millisecond, Lookback: 10 * time.Minute})
	for _, want := range []string{"recent", "more recent"} {
		if got := rn.next(); got.Text != want || !got.Replayed {
			t.Fatalf("line %+v, want %q replayed", got, want)
		}
	}
	appendFile(t, path, entry(time.Now().Add(time.Second), "new"))
	if got := rn.next(); got.Text != "new" || got.Replayed {
		t.Fatalf("line %+v, want the new entry, not replayed", got)
	}

	r := NewReader(Options{Lookback: 10 * time.Minute})
	r.started = time.Unix(1_700_000_600, 0)
	if args := r.args(); !slices.Contains(args, "--since=@1700000000") || slices.Contains(args, "--lines=0") {
		t.Fatalf("journalctl args %q", args)
	}
	r.cursor = "c1"
	if args := r.args(); !slices.Contains(args, "--after-cursor=c1") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--since") }) {
		t.Fatalf("journalctl args after a cursor %q", args)
	}
}
