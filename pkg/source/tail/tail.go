// Package tail follows a growing text file line by line, like `tail -F`.
//
// Follow survives log rotation (rename + create), copytruncate, deletion and
// re-creation, and a file that does not exist yet. It wakes up on fsnotify
// events for the file's directory and, because inotify misses events on some
// filesystems (NFS, some FUSE and overlay setups), also polls at a fixed
// interval.
//
// Semantics, in detail:
//
//   - Start position: the first time the file is opened, reading starts at its
//     end (Options.FromStart reads it from the start). A file that did not
//     exist when Follow started, or that replaces the followed one later, is
//     always read from its start: everything in it is new.
//   - Rotation and deletion: when the path names a different file (inode) than
//     the open one, or no file at all, the open file is "retired": it stays
//     open and is still read for Options.RotateGrace (writers keep writing to
//     a renamed log until they reopen it), then read to its end one last time
//     and closed. Meanwhile the file now at the path is read from its start.
//     Lines written to a retired file after its grace are lost.
//   - Truncation: when the open file becomes shorter than the read offset,
//     reading restarts at offset 0. A truncation followed by writes that grow
//     the file past the old offset before the follower looks is not detected
//     (the bytes before the old offset are then skipped), as with every
//     offset-based follower.
//   - Lines: lines are split on '\n', which is not part of the emitted line.
//     A line longer than Options.MaxLineBytes is emitted truncated to that
//     length as soon as the limit is reached; the rest of it, up to its
//     newline, is discarded. Memory is bounded by MaxLineBytes per open file
//     (plus one fixed read buffer) whatever the line length.
//   - Partial last line: bytes after the last newline are held until their
//     newline arrives. They are emitted without a newline only when no newline
//     can come any more: when their file is truncated, or closed after its
//     rotation grace. They are dropped when Follow returns.
//   - Errors: problems (file missing, unreadable, watch failures) are reported
//     through Options.OnError once; the same kind of problem is reported again
//     only after the follower recovered from it. A path that is missing while
//     a retired file is still being read is not reported until the grace
//     ends, so a rename + create rotation reports nothing. Follow itself only
//     returns when its context is done.
package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults for Options.
const (
	DefaultPollInterval = time.Second
	DefaultMaxLineBytes = 64 << 10
	DefaultRotateGrace  = 5 * time.Second
)

const (
	readBufSize = 64 << 10
	// maxRetired bounds the retired files kept open; on faster rotation the
	// oldest is closed early.
	maxRetired = 4
)

// Options tune Follow. The zero value is valid.
type Options struct {
	// FromStart reads the file from its start the first time it is opened,
	// instead of from its end.
	FromStart bool
	// PollInterval is how often the file is checked when no fsnotify event
	// arrives. Default DefaultPollInterval.
	PollInterval time.Duration
	// DisableNotify turns fsnotify off and relies on polling only.
	DisableNotify bool
	// MaxLineBytes caps the length of an emitted line. Default
	// DefaultMaxLineBytes.
	MaxLineBytes int
	// RotateGrace is how long a rotated-away or deleted file is still read.
	// Zero means DefaultRotateGrace; negative means not at all (it is read to
	// its end once and closed).
	RotateGrace time.Duration
	// OnError receives problems, each reported once until it clears. It is
	// called from Follow's goroutine. Nil discards them.
	OnError func(error)
	// OnOpen is called each time a file is opened at path, with the offset
	// reading starts at (the size of the file when starting at its end, else
	// 0). It is called from Follow's goroutine before any line of that file is
	// emitted. Nil is fine.
	OnOpen func(offset int64)
}

// Follow follows the file at path until ctx is done, and then returns
// ctx.Err(). It calls emit, from its own goroutine, once per line; line (without
// its newline) is only valid during the call and must be copied to be kept. at
// is when the bytes of the line were read.
func Follow(ctx context.Context, path string, opts Options, emit func(line []byte, at time.Time)) error {
	if path == "" {
		return errors.New("tail: empty path")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.RotateGrace == 0 {
		opts.RotateGrace = DefaultRotateGrace
	}
	f := &follower{
		path: filepath.Clean(path),
		opts: opts,
		emit: emit,
		buf:  make([]byte, readBufSize),
	}
	defer f.closeAll()
	return f.run(ctx)
}

type follower struct {
	path string
	opts Options
	emit func([]byte, time.Time)
	buf  []byte // shared read buffer

	cur       *source   // the file at path, or nil
	retired   []*source // rotated away or deleted, read until their grace ends
	triedOpen bool      // the first open attempt is behind us

	failing      bool // a file problem was reported and has not cleared
	watchFailing bool // a watch problem was reported and has not cleared
}

// source is one open file.
type source struct {
	file  *os.File
	off   int64 // bytes consumed
	split splitter
	until time.Time // for a retired file: end of its grace
}

func (f *follower) run(ctx context.Context) error {
	dir := filepath.Dir(f.path)
	var w *fsnotify.Watcher
	if !f.opts.DisableNotify {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			f.watchFail(fmt.Errorf("tail: fsnotify unavailable, polling every %v: %w", f.opts.PollInterval, err))
			w = nil
		} else {
			defer w.Close()
		}
	}
	var events chan fsnotify.Event
	var watchErrs chan error
	if w != nil {
		events, watchErrs = w.Events, w.Errors
	}
	watching := false
	tick := time.NewTicker(f.opts.PollInterval)
	defer tick.Stop()

	for {
		if w != nil && !watching {
			// Watch before reading, so that nothing written after the read
			// goes unnoticed until the next poll.
			if err := w.Add(dir); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					// A missing directory is reported as the missing
					// file; the watch is retried on every poll.
					f.watchFail(fmt.Errorf("tail: watch %s (polling meanwhile): %w", dir, err))
				}
			} else {
				watching = true
				f.watchFailing = false
			}
		}
		f.step(ctx, time.Now())
		if err := ctx.Err(); err != nil {
			return err
		}

	wait:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
				break wait
			case ev, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				if ev.Name == dir && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
					// The directory itself went away: its watch is dead.
					_ = w.Remove(dir)
					watching = false
					break wait
				}
				// Retired files have other names (or none): while there
				// are any, every event in the directory may concern them.
				if ev.Name == f.path || len(f.retired) > 0 {
					break wait
				}
			case err, ok := <-watchErrs:
				if !ok {
					watchErrs = nil
					continue
				}
				// Typically an event queue overflow: events were lost, so
				// look at the file now.
				f.watchFail(fmt.Errorf("tail: watch %s: %w", dir, err))
				break wait
			}
		}
	}
}

// step reads retired files and the current one to their end, and handles
// rotation, deletion and truncation.
func (f *follower) step(ctx context.Context, now time.Time) {
	kept := f.retired[:0]
	for _, r := range f.retired {
		f.readToEOF(ctx, r)
		if now.Before(r.until) {
			kept = append(kept, r)
		} else {
			r.close()
		}
	}
	clear(f.retired[len(kept):])
	f.retired = kept

	if f.cur == nil && !f.open() {
		return
	}
	// A few rounds at most: a rotation switches files and reads the new one.
	for range 3 {
		if !f.readToEOF(ctx, f.cur) {
			return
		}
		pathInfo, err := os.Stat(f.path)
		if err != nil {
			// Deleted (or made inaccessible).
			f.retire(ctx, now)
			if len(f.retired) == 0 {
				f.fail(fmt.Errorf("tail: %w", err))
			}
			return
		}
		cur, err := f.cur.file.Stat()
		if err != nil {
			f.fail(fmt.Errorf("tail: stat %s: %w", f.path, err))
			return
		}
		switch {
		case !os.SameFile(pathInfo, cur):
			// Rotated: the new file is read from its start.
			f.retire(ctx, now)
			if !f.open() {
				return
			}
			continue
		case cur.Size() < f.cur.off:
			// Truncated (copytruncate): start over.
			f.cur.split.flush()
			if _, err := f.cur.file.Seek(0, io.SeekStart); err != nil {
				f.fail(fmt.Errorf("tail: seek %s: %w", f.path, err))
				f.cur.close()
				f.cur = nil
				return
			}
			f.cur.off = 0
			continue
		}
		return
	}
}

// open opens the file at path as the current one; it reports whether it did.
// A failure is reported unless retired files are still being read (the path
// may be between a rename and a create).
func (f *follower) open() bool {
	first := !f.triedOpen
	f.triedOpen = true
	file, err := os.Open(f.path)
	if err != nil {
		if len(f.retired) == 0 {
			f.fail(fmt.Errorf("tail: %w", err))
		}
		return false
	}
	var off int64
	if first && !f.opts.FromStart {
		if off, err = file.Seek(0, io.SeekEnd); err != nil {
			file.Close()
			f.fail(fmt.Errorf("tail: seek %s: %w", f.path, err))
			return false
		}
	}
	f.cur = &source{file: file, off: off, split: splitter{max: f.opts.MaxLineBytes, emit: f.emit}}
	f.failing = false
	if f.opts.OnOpen != nil {
		f.opts.OnOpen(off)
	}
	return true
}

// retire moves the current file to the retired ones.
func (f *follower) retire(ctx context.Context, now time.Time) {
	r := f.cur
	f.cur = nil
	f.readToEOF(ctx, r)
	if f.opts.RotateGrace < 0 {
		r.close()
		return
	}
	if len(f.retired) == maxRetired {
		f.retired[0].close()
		f.retired = append(f.retired[:0], f.retired[1:]...)
	}
	r.until = now.Add(f.opts.RotateGrace)
	f.retired = append(f.retired, r)
}

// readToEOF reads what s has; it reports false on a read error (the file stays
// open and is tried again on the next wake-up) or when ctx is done.
func (f *follower) readToEOF(ctx context.Context, s *source) bool {
	for ctx.Err() == nil {
		n, err := s.file.Read(f.buf)
		if n > 0 {
			s.off += int64(n)
			s.split.write(f.buf[:n], time.Now())
		}
		if err == io.EOF || (n == 0 && err == nil) {
			return true
		}
		if err != nil {
			f.fail(fmt.Errorf("tail: read %s: %w", f.path, err))
			return false
		}
	}
	return false
}

// close emits a held partial line and closes the file.
func (s *source) close() {
	s.split.flush()
	s.file.Close()
}

// closeAll closes every file without emitting anything more.
func (f *follower) closeAll() {
	if f.cur != nil {
		f.cur.file.Close()
	}
	for _, r := range f.retired {
		r.file.Close()
	}
}

func (f *follower) fail(err error) {
	if f.failing {
		return
	}
	f.failing = true
	if f.opts.OnError != nil {
		f.opts.OnError(err)
	}
}

func (f *follower) watchFail(err error) {
	if f.watchFailing {
		return
	}
	f.watchFailing = true
	if f.opts.OnError != nil {
		f.opts.OnError(err)
	}
}

// ReadLines reads rd to its end and calls emit with each line, split and
// capped at maxLineBytes (<= 0: DefaultMaxLineBytes) as Follow does; a last
// line without newline is emitted too. line is only valid during the call. It
// returns rd's error, or nil at EOF.
func ReadLines(rd io.Reader, maxLineBytes int, emit func(line []byte)) error {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	s := splitter{max: maxLineBytes, emit: func(line []byte, _ time.Time) { emit(line) }}
	buf := make([]byte, readBufSize)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			s.write(buf[:n], time.Time{})
		}
		if err == io.EOF {
			s.flush()
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// splitter cuts a byte stream into lines of at most max bytes.
type splitter struct {
	max     int
	emit    func([]byte, time.Time)
	line    []byte // held partial line, len <= max
	discard bool   // the current line was emitted truncated; drop to its newline
}

func (s *splitter) write(p []byte, at time.Time) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.hold(p, at)
			return
		}
		seg := p[:i]
		p = p[i+1:]
		switch {
		case s.discard:
			s.discard = false
		case len(s.line) == 0:
			// Fast path: the whole line is in p; emit it without copying.
			if len(seg) > s.max {
				seg = seg[:s.max]
			}
			s.emit(seg[:len(seg):len(seg)], at)
		default:
			s.hold(seg, at)
			if s.discard {
				s.discard = false
				continue
			}
			s.emit(s.line, at)
			s.line = s.line[:0]
		}
	}
}

// hold appends to the held partial line; a line that exceeds max is emitted
// truncated right away and the rest of it is discarded.
func (s *splitter) hold(p []byte, at time.Time) {
	if s.discard {
		return
	}
	if room := s.max - len(s.line); len(p) > room {
		s.line = append(s.line, p[:room]...)
		s.emit(s.line, at)
		s.line = s.line[:0]
		s.discard = true
		return
	}
	if s.line == nil {
		s.line = make([]byte, 0, min(s.max, 4<<10))
	}
	s.line = append(s.line, p...)
}

// flush emits a held partial line and forgets a discarded one: the stream it
// belonged to has ended.
func (s *splitter) flush() {
	if len(s.line) > 0 {
		s.emit(s.line, time.Now())
	}
	s.line = s.line[:0]
	s.discard = false
}

// reset forgets a held partial line and a discarded one: the stream it
// belonged to was left (Cursor skipped ahead or the file was replaced).
func (s *splitter) reset() {
	s.line = s.line[:0]
	s.discard = false
}
