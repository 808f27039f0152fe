package tail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultMaxRead is Cursor's default bound on one Read.
const DefaultMaxRead = 1 << 20

// Cursor reads a file's new lines on demand: each Read hands over what was
// appended since the previous one. It is Follow's polled form, for a periodic
// check that looks at a log between its runs (the VPC CNI's ipamd.log) and
// has no goroutine of its own to follow it with.
//
// It splits lines as Follow does (MaxLineBytes; a partial last line is held
// until its newline comes with a later Read) and starts where Follow starts:
// the first Read of a file that exists begins at its end, since old lines say
// nothing about now; a file that appears later, that replaces the read one at
// its path (rotation by rename: another file) or that became shorter
// (truncation) is read from its start. Unlike Follow it does not read a
// rotated-away file to its end: what was written to it after the last Read is
// not read. One Read reads at most MaxRead bytes; a log that grew by more is
// skipped ahead to its last MaxRead bytes, so that a burst is not buffered.
//
// The zero value is ready to use. A Cursor is not safe for concurrent use.
type Cursor struct {
	// MaxRead bounds one Read. Zero means DefaultMaxRead.
	MaxRead int64
	// MaxLineBytes caps the length of a line. Zero means DefaultMaxLineBytes.
	MaxLineBytes int

	started bool
	file    os.FileInfo // the file read last; nil when there was none
	offset  int64
	split   splitter
	buf     []byte
}

// Read calls emit with each complete line appended to the file at path since
// the last Read; line is only valid during the call. A missing file has no
// lines and is no error: a log that appears later is read from its start.
func (c *Cursor) Read(path string, emit func(line []byte)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		c.started, c.file, c.offset = true, nil, 0
		c.split.reset()
		return nil
	}
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	size := info.Size()
	switch {
	case !c.started:
		c.started, c.file, c.offset = true, info, size
		return nil
	case c.file == nil || !os.SameFile(c.file, info) || size < c.offset:
		c.offset = 0
		c.split.reset()
	}
	c.file = info
	maxRead := c.MaxRead
	if maxRead <= 0 {
		maxRead = DefaultMaxRead
	}
	if size-c.offset > maxRead {
		c.offset = size - maxRead
		c.split.reset()
	}
	c.split.max = c.MaxLineBytes
	if c.split.max <= 0 {
		c.split.max = DefaultMaxLineBytes
	}
	c.split.emit = func(line []byte, _ time.Time) { emit(line) }
	defer func() { c.split.emit = nil }()
	if c.buf == nil {
		c.buf = make([]byte, min(readBufSize, maxRead))
	}
	// Read up to the size seen by Stat: what is written meanwhile waits for
	// the next Read, so that one Read ends however fast the log grows.
	r := io.NewSectionReader(f, c.offset, size-c.offset)
	for {
		n, err := r.Read(c.buf)
		if n > 0 {
			c.offset += int64(n)
			c.split.write(c.buf[:n], time.Time{})
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tail: read %s: %w", path, err)
		}
	}
}

// Reset forgets the file: the next Read starts as the first did.
func (c *Cursor) Reset() {
	c.started, c.file, c.offset = false, nil, 0
	c.split.reset()
}
