package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/source/tail"
)

// Defaults for Options.
const (
	DefaultJournalctl    = "journalctl"
	DefaultMinBackoff    = time.Second
	DefaultMaxBackoff    = time.Minute
	DefaultMaxEntryBytes = 1 << 20
)

// outputFields are the fields journalctl is asked for (parseEntry says
// what each is for); it always adds __CURSOR, __REALTIME_TIMESTAMP,
// __MONOTONIC_TIMESTAMP and _BOOT_ID.
const outputFields = "MESSAGE,_SYSTEMD_UNIT,UNIT,_TRANSPORT,_PID,_UID,_COMM,SYSLOG_FACILITY"

// Options configure a Reader. The zero value runs journalctl from $PATH on
// the system journal.
type Options struct {
	// HostRoot is where the host's filesystem is; "" means "/". Unless
	// Directory is set, a HostRoot other than "/" is passed to journalctl as
	// --root, so that it reads <HostRoot>/var/log/journal and
	// <HostRoot>/run/log/journal.
	HostRoot string
	// Directory, if set, is the journal directory relative to HostRoot,
	// passed as --directory (e.g. "var/log/journal").
	Directory string
	// Journalctl is the journalctl command; default DefaultJournalctl.
	Journalctl string
	// Runner starts journalctl; nil means ExecRunner{}.
	Runner Runner
	// MinBackoff and MaxBackoff bound the wait before restarting journalctl
	// after it exited; it doubles from MinBackoff after each exit, and goes
	// back to MinBackoff after a run that
	// delivered entries or lasted MaxBackoff. Defaults DefaultMinBackoff and
	// DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Clock paces the restarts; nil is the real clock.
	Clock clock.Clock

	// File, if set, switches to file mode: the JSON-lines file at
	// <HostRoot>/<File> is tailed from its end (package tail) instead of
	// running journalctl. For tests and the simulation.
	File string
	// PollInterval is the tail's polling fallback in file mode; zero means
	// the tail package's default.
	PollInterval time.Duration

	// MaxEntryBytes caps one JSON entry (one line); longer ones are cut,
	// so they count as malformed. Default DefaultMaxEntryBytes.
	MaxEntryBytes int
	// OnError receives problems that do not stop the reader: journalctl
	// exits (each one, spaced by the backoff), malformed entries (once until
	// a good one comes), tail problems. Nil discards them.
	OnError func(error)
	// Lookback, when positive, reads again at start the entries of the
	// last Lookback before the reader started (journalctl --since; the
	// file from its start), marked Replayed: no new detections, they
	// restore what counts repetitions (a reason promoted when it repeats)
	// across a restart of the agent. Zero reads from now on.
	Lookback time.Duration
}

// Stats counts what a Reader saw.
type Stats struct {
	Emitted   uint64 // entries handed to emit
	Malformed uint64 // entries parseEntry rejected
	Restarts  uint64 // times journalctl exited and was started again
}

// Runner starts a journalctl process. The process must be killed when ctx is
// done.
type Runner interface {
	Start(ctx context.Context, path string, args []string) (Process, error)
}

// Process is a started journalctl.
type Process interface {
	// Stdout is the process's standard output. The reader reads it to EOF
	// before calling Wait.
	Stdout() io.Reader
	// Wait waits for the process to exit; a non-nil error describes how it
	// failed (exit status, and the end of its standard error if any).
	Wait() error
}

// Reader reads journal entries; see the package documentation.
type Reader struct {
	opts Options
	root string

	emitted atomic.Uint64
	malf    atomic.Uint64
	restart atomic.Uint64

	// Used by Run's goroutine only.
	emitLine func(logline.Line)
	cursor   string // of the last entry read, to resume after a restart
	badEntry bool   // a malformed entry was reported and no good one followed
	// started is when Run first started: entries before it are replayed
	// (Options.Lookback).
	started time.Time
}

// NewReader returns a Reader; Run starts it.
func NewReader(opts Options) *Reader {
	root := opts.HostRoot
	if root == "" {
		root = "/"
	}
	if opts.Journalctl == "" {
		opts.Journalctl = DefaultJournalctl
	}
	if opts.Runner == nil {
		opts.Runner = ExecRunner{}
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.MaxEntryBytes <= 0 {
		opts.MaxEntryBytes = DefaultMaxEntryBytes
	}
	return &Reader{opts: opts, root: root}
}

// Stats returns the counters so far; safe to call at any time.
func (r *Reader) Stats() Stats {
	return Stats{Emitted: r.emitted.Load(), Malformed: r.malf.Load(), Restarts: r.restart.Load()}
}

// Run reads entries until ctx is done and then returns ctx.Err(). It calls
// emit from its own goroutine, one call per entry. Entries start with the
// first one written after Run started.
func (r *Reader) Run(ctx context.Context, emit func(logline.Line)) error {
	r.emitLine = emit
	if r.started.IsZero() {
		clk := r.opts.Clock
		if clk == nil {
			clk = clock.RealClock{}
		}
		r.started = clk.Now()
	}
	if r.opts.File != "" {
		return r.runFile(ctx)
	}
	return r.runJournalctl(ctx)
}

func (r *Reader) runFile(ctx context.Context) error {
	path := filepath.Join(r.root, r.opts.File)
	opts := tail.Options{
		PollInterval: r.opts.PollInterval,
		MaxLineBytes: r.opts.MaxEntryBytes,
		OnError:      r.opts.OnError,
		FromStart:    r.opts.Lookback > 0,
	}
	return tail.Follow(ctx, path, opts, func(line []byte, _ time.Time) {
		if len(line) > 0 {
			r.handle(line)
		}
	})
}

// args returns journalctl's arguments: follow from now on, or resume after
// the last entry seen.
func (r *Reader) args() []string {
	args := []string{"--output=json", "--all", "--follow", "--no-pager", "--quiet",
		"--output-fields=" + outputFields}
	switch {
	case r.cursor != "":
		args = append(args, "--after-cursor="+r.cursor)
	case r.opts.Lookback > 0:
		args = append(args, "--since=@"+strconv.FormatInt(r.started.Add(-r.opts.Lookback).Unix(), 10))
	default:
		args = append(args, "--lines=0")
	}
	switch {
	case r.opts.Directory != "":
		args = append(args, "--directory="+filepath.Join(r.root, r.opts.Directory))
	case filepath.Clean(r.root) != "/":
		args = append(args, "--root="+r.root)
	}
	return args
}

func (r *Reader) runJournalctl(ctx context.Context) error {
	backoff.Supervisor{Clock: r.opts.Clock, Initial: r.opts.MinBackoff, Max: r.opts.MaxBackoff,
		OnExit: func(err error, wait time.Duration) {
			r.restart.Add(1)
			if r.opts.OnError != nil {
				r.opts.OnError(fmt.Errorf("journal: %s (restarting in %v): %w", r.opts.Journalctl, wait, err))
			}
		},
	}.Run(ctx, func(ctx context.Context) (bool, error) {
		n, err := r.runOnce(ctx)
		if err == nil {
			err = errors.New("exited")
		}
		return n > 0, err
	})
	return ctx.Err()
}

// runOnce runs journalctl until it exits; it returns how many entries it
// delivered and why it ended.
func (r *Reader) runOnce(ctx context.Context) (int, error) {
	// journalctl runs as root: it, and what it loads, must be root's alone
	// (childproc.CheckTrust), looked for in the agent's own filesystem.
	path, err := childproc.LookPathInRoot("/", r.opts.Journalctl)
	if err != nil {
		return 0, err
	}
	p, err := r.opts.Runner.Start(ctx, path, r.args())
	if err != nil {
		return 0, err
	}
	n := 0
	readErr := tail.ReadLines(p.Stdout(), r.opts.MaxEntryBytes, func(line []byte) {
		if len(line) > 0 && r.handle(line) {
			n++
		}
	})
	if readErr != nil {
		// Stop the process so that Wait returns: drain what is left.
		_, _ = io.Copy(io.Discard, p.Stdout())
	}
	waitErr := p.Wait()
	return n, errors.Join(readErr, waitErr)
}

// handle parses and emits one entry; it reports whether it was good.
func (r *Reader) handle(line []byte) bool {
	l, cursor, err := parseEntry(line)
	if err != nil {
		r.malf.Add(1)
		if !r.badEntry {
			r.badEntry = true
			if r.opts.OnError != nil {
				r.opts.OnError(err)
			}
		}
		return false
	}
	r.badEntry = false
	if cursor != "" {
		r.cursor = cursor
	}
	if r.opts.Lookback > 0 && l.Time.Before(r.started) {
		if l.Time.Before(r.started.Add(-r.opts.Lookback)) {
			return true // older than the lookback (a file read from its start)
		}
		l.Replayed = true
	}
	r.emitted.Add(1)
	r.emitLine(l)
	return true
}
