package kmsg

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/source/tail"
)

// DefaultLookback is how far back records are replayed on start.
const DefaultLookback = 10 * time.Minute

const (
	// The kernel returns at most 8 KiB per record (message and dictionary);
	// a read with a smaller buffer fails with EINVAL. Start above that and
	// grow on EINVAL up to maxReadBuf, should a kernel ever send more.
	initialReadBuf = 16 << 10
	maxReadBuf     = 1 << 20
)

// Options configure a Reader. The zero value is valid.
type Options struct {
	// HostRoot is where the host's filesystem is; "" means "/".
	HostRoot string
	// Lookback: on start, the device replays its whole ring buffer; only
	// records from the last Lookback are emitted (judged against
	// <HostRoot>/proc/uptime). Zero means DefaultLookback; negative means
	// none (start with the next new record). Without a readable
	// proc/uptime, none are replayed. In regular-file mode the records the
	// file holds at start are judged the same way.
	Lookback time.Duration
	// OnError receives problems that do not stop the reader (malformed
	// records, missing proc files, tail problems), each reported once until
	// it clears. Nil discards them.
	OnError func(error)
	// PollInterval is the polling fallback in regular-file mode; zero means
	// the tail package's default.
	PollInterval time.Duration
}

// Stats counts what a Reader saw.
type Stats struct {
	Emitted     uint64 // records handed to emit
	Skipped     uint64 // replayed records older than the lookback
	Overwritten uint64 // times the ring buffer overwrote unread records (EPIPE)
	Malformed   uint64 // records Parse rejected
}

// Reader reads kernel log records from <HostRoot>/dev/kmsg.
//
// If that is a character device (a real host), each read(2) returns one
// record. If it is a regular file (tests, simulation), it is tailed from its
// end with package tail: every appended line is a record; lines that start
// with a space are the dictionary of the record before and are dropped, as
// logline.Line has no place for them.
//
// Record times are converted to wall-clock time with the boot time from
// <HostRoot>/proc/stat (btime, one-second resolution); without it, the time
// a record was read is used. Records of every level are emitted, and
// fragments of a line (flag "c") are emitted as they come, not merged:
// filtering and interpretation are the rules' job.
type Reader struct {
	opts    Options
	root    string
	emitted atomic.Uint64
	skipped atomic.Uint64
	overw   atomic.Uint64
	malf    atomic.Uint64

	// Used by Run's goroutine only.
	boot      time.Time // zero if unknown
	badRecord bool      // a malformed record was reported and no good one followed
	emitLine  func(logline.Line)
}

// NewReader returns a Reader; Run starts it.
func NewReader(opts Options) *Reader {
	root := opts.HostRoot
	if root == "" {
		root = "/"
	}
	if opts.Lookback == 0 {
		opts.Lookback = DefaultLookback
	}
	return &Reader{opts: opts, root: root}
}

// Stats returns the counters so far; safe to call at any time.
func (r *Reader) Stats() Stats {
	return Stats{
		Emitted:     r.emitted.Load(),
		Skipped:     r.skipped.Load(),
		Overwritten: r.overw.Load(),
		Malformed:   r.malf.Load(),
	}
}

// Run reads records until ctx is done and then returns ctx.Err(). It calls
// emit from its own goroutine, one call per record, with Source logline.Kmsg
// and the record's Origin.
// It returns another error when <HostRoot>/dev/kmsg is missing, neither a
// character device nor a regular file, or fails to read.
func (r *Reader) Run(ctx context.Context, emit func(logline.Line)) error {
	path := filepath.Join(r.root, "dev", "kmsg")
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("kmsg: %w", err)
	}
	r.emitLine = emit
	r.boot = r.bootTime()
	switch mode := fi.Mode(); {
	case mode&os.ModeCharDevice != 0:
		return r.runDevice(ctx, path)
	case mode.IsRegular():
		return r.runFile(ctx, path)
	default:
		return fmt.Errorf("kmsg: %s is neither a character device nor a regular file (%v)", path, mode)
	}
}

func (r *Reader) runDevice(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kmsg: %w", err)
	}
	defer f.Close()
	// /dev/kmsg supports poll, so the os package reads it through the
	// runtime poller and a deadline interrupts a blocked read.
	stop := context.AfterFunc(ctx, func() {
		if f.SetReadDeadline(time.Unix(1, 0)) != nil {
			f.Close()
		}
	})
	defer stop()
	return r.readDevice(ctx, f)
}

// device is the part of *os.File that readDevice uses.
type device interface {
	io.Reader
	io.Seeker
}

// readDevice reads records from an open /dev/kmsg, one per read.
func (r *Reader) readDevice(ctx context.Context, dev device) error {
	replay := false
	var cutoff time.Duration  // replayed records before it are skipped
	var started time.Duration // records before it were there at start
	if r.opts.Lookback > 0 {
		uptime, err := r.uptime()
		if err != nil {
			r.report(fmt.Errorf("kmsg: cannot tell recent records from old ones, replaying none: %w", err))
		} else {
			replay, cutoff, started = true, uptime-r.opts.Lookback, uptime
		}
	}
	if !replay {
		// Start after the last record.
		if _, err := dev.Seek(0, io.SeekEnd); err != nil {
			return fmt.Errorf("kmsg: seek to the end: %w", err)
		}
	}

	buf := make([]byte, initialReadBuf)
	for {
		n, err := dev.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			switch {
			case errors.Is(err, syscall.EPIPE):
				// Unread records were overwritten; the read position
				// moved on to the oldest record still there.
				r.overw.Add(1)
				continue
			case errors.Is(err, syscall.EINVAL) && len(buf) < maxReadBuf:
				// The buffer is too small for the next record.
				buf = make([]byte, 2*len(buf))
				continue
			case errors.Is(err, syscall.EAGAIN):
				// Only if the descriptor is non-blocking outside the
				// poller; wait a little.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				continue
			case errors.Is(err, io.EOF):
				return fmt.Errorf("kmsg: unexpected end of the device")
			}
			return fmt.Errorf("kmsg: read: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("kmsg: unexpected empty read")
		}
		rec, ok := r.parse(buf[:n])
		if !ok {
			continue
		}
		if rec.Monotonic < cutoff {
			r.skipped.Add(1)
			continue
		}
		r.emit(rec, time.Now(), rec.Monotonic < started)
	}
}

// runFile follows a regular file of records (a simulated host). As the
// device replays its ring buffer, the records the file holds when it is
// opened are replayed when they are within Lookback of the host's uptime;
// records appended later are all emitted, whatever their timestamps (a
// test's records often start at boot).
func (r *Reader) runFile(ctx context.Context, path string) error {
	opts := tail.Options{PollInterval: r.opts.PollInterval, OnError: r.opts.OnError}
	var (
		existing int64 // bytes of the file at start still to be judged
		cutoff   time.Duration
	)
	if r.opts.Lookback > 0 {
		uptime, err := r.uptime()
		fi, serr := os.Stat(path)
		switch {
		case err != nil:
			r.report(fmt.Errorf("kmsg: cannot tell recent records from old ones, replaying none: %w", err))
		case serr == nil && fi.Size() > 0:
			opts.FromStart, existing, cutoff = true, fi.Size(), uptime-r.opts.Lookback
		}
	}
	return tail.Follow(ctx, path, opts, func(line []byte, at time.Time) {
		old := existing > 0
		existing -= int64(len(line)) + 1
		if len(line) == 0 || line[0] == ' ' {
			return // a dictionary line of the previous record
		}
		rec, ok := r.parse(line)
		if !ok {
			return
		}
		if old && rec.Monotonic < cutoff {
			r.skipped.Add(1)
			return
		}
		r.emit(rec, at, old)
	})
}

func (r *Reader) parse(b []byte) (Record, bool) {
	rec, err := Parse(b)
	if err != nil {
		r.malf.Add(1)
		if !r.badRecord {
			r.badRecord = true
			r.report(err)
		}
		return Record{}, false
	}
	r.badRecord = false
	return rec, true
}

// emit hands rec on; backlog: it was in the ring buffer when the reader
// started.
func (r *Reader) emit(rec Record, read time.Time, backlog bool) {
	t := read
	if !r.boot.IsZero() {
		t = r.boot.Add(rec.Monotonic)
	}
	r.emitted.Add(1)
	r.emitLine(logline.Line{Source: logline.Kmsg, Origin: rec.Origin(), Text: rec.Message, Time: t, Backlog: backlog && !r.boot.IsZero()})
}

func (r *Reader) report(err error) {
	if r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

// bootTime reads btime from <root>/proc/stat; zero if unavailable (reported).
func (r *Reader) bootTime() time.Time {
	path := filepath.Join(r.root, "proc", "stat")
	f, err := os.Open(path)
	if err != nil {
		r.report(fmt.Errorf("kmsg: boot time unknown, using read times: %w", err))
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // the "intr" line is long
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("btime ")); ok {
			secs, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil || secs <= 0 {
				break
			}
			return time.Unix(secs, 0)
		}
	}
	r.report(fmt.Errorf("kmsg: boot time unknown, using read times: no valid btime in %s", path))
	return time.Time{}
}

// uptime reads the time since boot from <root>/proc/uptime.
func (r *Reader) uptime() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(r.root, "proc", "uptime"))
	if err != nil {
		return 0, err
	}
	first, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte{' '})
	secs, err := strconv.ParseFloat(string(first), 64)
	if err != nil || secs < 0 || secs > 1e9 {
		return 0, fmt.Errorf("bad proc/uptime %q", first)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
