// Package collect runs diagnostic collectors concurrently, each with its own
// timeout and its own result, and streams what they write into a bundle.
//
// A collector writes files through an Output. Files are redacted as they are
// written and spooled to disk (a tar entry needs its size up front, and
// redaction changes sizes), then appended to the bundle by a single writer
// as soon as their collector is done, and deleted. A collector that
// overruns its timeout is abandoned after a grace period: the files it had
// finished are kept, the rest is dropped, and the bundle goes on without it.
package collect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
)

// Collector gathers one piece of diagnostic data.
type Collector struct {
	// Name is unique in a bundle: "<category>/<what>".
	Name     string
	Category string
	// Timeout overrides Options.Timeout.
	Timeout time.Duration
	Run     func(ctx context.Context, out *Output) error
}

// SkipError is returned by a collector that does not apply to this host.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skip returns a SkipError.
func Skip(format string, args ...any) error {
	return &SkipError{Reason: fmt.Sprintf(format, args...)}
}

// Options configure Run.
type Options struct {
	// SpoolDir holds outputs until they are in the bundle (created, then
	// removed).
	SpoolDir string
	// Parallelism bounds collectors running at once (default 4).
	Parallelism int
	// Timeout is a collector's default time limit (default 30s).
	Timeout time.Duration
	// Grace is how long a collector that overran its timeout may take to
	// return before it is abandoned (default 2s).
	Grace time.Duration
	// MaxFileBytes caps one output file (after redaction; default 64 MiB).
	MaxFileBytes int64
	Redactor     *redact.Redactor
	Clock        clock.PassiveClock
	// OnDone is called after each collector's files are in the bundle.
	OnDone func(r bundle.CollectorResult, done, total int)
}

func (o *Options) defaults() {
	if o.Parallelism <= 0 {
		o.Parallelism = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 2 * time.Second
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 64 << 20
	}
	if o.Redactor == nil {
		o.Redactor = redact.New()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

type finished struct {
	idx    int
	res    bundle.CollectorResult
	out    *Output
	closed []*File // files complete when the collector ended or was abandoned
}

// Run runs the collectors and adds their files to b. It returns one result
// per collector, in the order given, and the total of redactions.
func Run(ctx context.Context, collectors []Collector, b *bundle.Writer, opts Options) ([]bundle.CollectorResult, int, error) {
	opts.defaults()
	if err := os.MkdirAll(opts.SpoolDir, 0o700); err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(opts.SpoolDir)

	results := make(chan finished, len(collectors))
	sem := make(chan struct{}, opts.Parallelism)
	for i, c := range collectors {
		go func() {
			notStarted := func() {
				results <- finished{idx: i, res: bundle.CollectorResult{Name: c.Name, Category: c.Category, Error: "not started: " + ctx.Err().Error()}}
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				notStarted()
				return
			}
			if ctx.Err() != nil {
				<-sem
				notStarted()
				return
			}
			f := runOne(ctx, i, c, opts)
			<-sem // an abandoned collector gives its slot back: it may never return
			results <- f
		}()
	}

	out := make([]bundle.CollectorResult, len(collectors))
	redactions := 0
	for done := 1; done <= len(collectors); done++ {
		f := <-results
		for _, file := range f.closed {
			// Sources and notes come from the host too (a path, a tool's
			// arguments): the manifest is redacted like every entry.
			entry := bundle.FileEntry{Path: file.name, Redactions: file.redactions, Source: redactString(opts.Redactor, file.source), Note: redactString(opts.Redactor, file.note)}
			truncated, size, err := b.AddFile(file.name, file.spool)
			entry.Bytes = size
			switch {
			case errors.Is(err, bundle.ErrFull):
				entry.Note = joinNote(entry.Note, "left out: bundle size cap")
				entry.Bytes = 0
			case err != nil:
				return nil, 0, fmt.Errorf("writing %s to the bundle: %w", file.name, err)
			case truncated:
				entry.Note = joinNote(entry.Note, "cut: bundle size cap")
			}
			redactions += file.redactions
			f.res.Files = append(f.res.Files, entry)
			_ = os.Remove(file.spool)
		}
		if f.out != nil {
			for _, name := range f.out.dropped() {
				f.res.Files = append(f.res.Files, bundle.FileEntry{Path: name, Note: "left out: its collector did not finish it"})
			}
		}
		out[f.idx] = f.res
		if opts.OnDone != nil {
			opts.OnDone(f.res, done, len(collectors))
		}
	}
	return out, redactions, nil
}

func redactString(r *redact.Redactor, s string) string {
	if s == "" {
		return s
	}
	out, _ := r.String(s)
	return out
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func runOne(ctx context.Context, idx int, c Collector, opts Options) finished {
	res := bundle.CollectorResult{Name: c.Name, Category: c.Category, Started: opts.Clock.Now()}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = opts.Timeout
	}
	dir := filepath.Join(opts.SpoolDir, fmt.Sprintf("%03d", idx))
	out := &Output{dir: dir, prefix: c.Category, red: opts.Redactor, maxFile: opts.MaxFileBytes}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("collector panicked: %v", p)
			}
		}()
		done <- c.Run(cctx, out)
	}()
	var err error
	abandoned := false
	select {
	case err = <-done:
	case <-cctx.Done():
		grace := time.NewTimer(opts.Grace)
		select {
		case err = <-done:
		case <-grace.C:
			abandoned = true
		}
		grace.Stop()
	}
	start := res.Started
	res.Duration = bundle.Duration(opts.Clock.Since(start))
	closed := out.finish(abandoned)
	var skip *SkipError
	switch {
	case abandoned:
		res.TimedOut = true
		res.Error = fmt.Sprintf("timed out after %v and did not stop; abandoned", timeout)
	case ctx.Err() != nil:
		res.Error = "cancelled: " + ctx.Err().Error()
	case errors.As(err, &skip):
		res.Skipped = skip.Reason
	case cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		res.TimedOut = true
		res.Error = fmt.Sprintf("timed out after %v", timeout)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			res.Error += ": " + err.Error()
		}
	case err != nil:
		res.Error = err.Error()
	}
	// Errors carry a tool's stderr and go into status, skip reasons a
	// runtime's message: redact them too.
	res.Error = redactString(opts.Redactor, res.Error)
	res.Skipped = redactString(opts.Redactor, res.Skipped)
	return finished{idx: idx, res: res, out: out, closed: closed}
}

// Output is where a collector writes its files. Paths are relative to the
// collector's category directory in the bundle.
type Output struct {
	dir     string
	prefix  string
	red     *redact.Redactor
	maxFile int64

	mu        sync.Mutex
	files     []*File
	abandoned bool
	made      bool
}

// Create starts a file. What is written is redacted; past the per-file limit
// writes fail with ErrFileLimit (the file keeps its head and is marked).
func (o *Output) Create(name string) (*File, error) {
	name = filepath.ToSlash(filepath.Clean("/" + name))[1:] // no escaping the category
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.abandoned {
		return nil, errors.New("collector abandoned")
	}
	if !o.made {
		if err := os.MkdirAll(o.dir, 0o700); err != nil {
			return nil, err
		}
		o.made = true
	}
	spool := filepath.Join(o.dir, fmt.Sprintf("%04d", len(o.files)))
	fh, err := os.OpenFile(spool, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	f := &File{name: o.prefix + "/" + name, spool: spool, fh: fh, limit: o.maxFile}
	f.lw = &limitWriter{f: f}
	f.rw = o.red.NewWriter(f.lw)
	o.files = append(o.files, f)
	return f, nil
}

// WriteFile creates name with data.
func (o *Output) WriteFile(name string, data []byte) error {
	f, err := o.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil && !errors.Is(err, ErrFileLimit) {
		f.Close()
		return err
	}
	return f.Close()
}

// finish closes what the collector left open (unless it was abandoned, when
// an open file may still be written to) and returns the complete files.
func (o *Output) finish(abandoned bool) []*File {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.abandoned = true
	var out []*File
	for _, f := range o.files {
		f.mu.Lock()
		closed := f.closed
		f.mu.Unlock()
		if !closed && !abandoned {
			_ = f.Close()
			closed = true
		}
		if closed {
			out = append(out, f)
		}
	}
	return out
}

func (o *Output) dropped() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, f := range o.files {
		f.mu.Lock()
		if !f.closed {
			out = append(out, f.name)
		}
		f.mu.Unlock()
	}
	return out
}

// ErrFileLimit is returned by File.Write past the per-file limit.
var ErrFileLimit = errors.New("per-file size limit reached")

// File is an output file being written.
type File struct {
	name, spool string
	fh          *os.File
	rw          *redact.Writer
	lw          *limitWriter
	limit       int64

	mu         sync.Mutex
	written    int64
	full       bool
	closed     bool
	redactions int
	source     string
	note       string
}

// Write implements io.Writer.
func (f *File) Write(p []byte) (int, error) { return f.rw.Write(p) }

// Context feeds the redactor what precedes the part of a source this file
// gets (the bytes before a tail window) without writing it: a key block or
// YAML block opened there is masked in what follows. Call it before Write;
// p should end at a line end.
func (f *File) Context(p []byte) error { return f.rw.Context(p) }

// Full reports that the per-file limit was reached.
func (f *File) Full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.full
}

// SetSource records the host path the file was copied from.
func (f *File) SetSource(path string) {
	f.mu.Lock()
	f.source = path
	f.mu.Unlock()
}

// Note adds a remark for the manifest ("last 32 MiB of 1.2 GiB").
func (f *File) Note(s string) {
	f.mu.Lock()
	f.note = joinNote(f.note, s)
	f.mu.Unlock()
}

// Close flushes and closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	err := f.rw.Close()
	if errors.Is(err, ErrFileLimit) {
		err = nil
	}
	if cerr := f.fh.Close(); err == nil {
		err = cerr
	}
	f.mu.Lock()
	f.closed = true
	f.redactions = f.rw.Redactions()
	if f.full {
		f.note = joinNote(f.note, fmt.Sprintf("cut at the per-file limit of %d MiB", f.limit>>20))
	}
	f.mu.Unlock()
	return err
}

// limitWriter writes to the spool file up to the limit.
type limitWriter struct{ f *File }

func (l *limitWriter) Write(p []byte) (int, error) {
	f := l.f
	f.mu.Lock()
	room := f.limit - f.written
	if room <= 0 {
		f.full = true
		f.mu.Unlock()
		return 0, ErrFileLimit
	}
	cut := false
	if int64(len(p)) > room {
		p, cut = p[:room], true
	}
	f.mu.Unlock()
	n, err := f.fh.Write(p)
	f.mu.Lock()
	f.written += int64(n)
	if cut {
		f.full = true
	}
	f.mu.Unlock()
	if err == nil && cut {
		err = ErrFileLimit
	}
	return n, err
}
