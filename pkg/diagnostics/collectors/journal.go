package collectors

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strconv"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// journalArgs reads the host's journal (under the host root) from Since on,
// newest 100,000 lines at most, with precise timestamps.
func (e *Env) journalArgs(filter ...string) []string {
	args := []string{"--no-pager", "--output=short-iso-precise", "--lines=100000",
		"--since=@" + strconv.FormatInt(e.Since.Unix(), 10)}
	if root := filepath.Clean(e.HostRoot); root != "/" {
		args = append(args, "--root="+root)
	}
	return append(args, filter...)
}

// journalContextLines is how many entries before a journal window are read
// as context for the redactor.
const journalContextLines = 200

// journal writes the journal of filter into file. The window (--since,
// --lines) may start inside a key block or a YAML block printed line by
// line; the entries just before its first one are fed to the redactor as
// context, so that it knows.
func (e *Env) journal(ctx context.Context, out *collect.Output, file string, filter ...string) error {
	return runToolWith(ctx, e, out, file, func(dst *collect.File) io.Writer {
		return &journalWindow{dst: dst, context: func(first []byte) {
			until, ok := journalTime(first)
			if !ok {
				return
			}
			args := []string{"--no-pager", "--output=short-iso-precise", "--lines=" + strconv.Itoa(journalContextLines),
				"--until=@" + strconv.FormatInt(until.Unix()+1, 10)}
			if root := filepath.Clean(e.HostRoot); root != "/" {
				args = append(args, "--root="+root)
			}
			var b bytes.Buffer
			if err := e.Commands.Run(ctx, "journalctl", append(args, filter...), &limitedBuffer{b: &b, max: 1 << 20}); err == nil {
				_ = dst.Context(beforeLine(b.Bytes(), first))
			}
		}}
	}, "journalctl", e.journalArgs(filter...)...)
}

// beforeLine cuts text before the first line equal to line: the context
// query ends at a whole second, so it returns the window's first entries
// too, and a state a line opens (a secret env var's name, whose value is on
// the next line) must meet the window's line, not its copy.
func beforeLine(text, line []byte) []byte {
	for off := 0; off < len(text); {
		end := bytes.IndexByte(text[off:], '\n')
		if end < 0 {
			end = len(text) - off
		}
		if bytes.Equal(text[off:off+end], line) {
			return text[:off]
		}
		off += end + 1
	}
	return text
}

// journalTime reads the timestamp of a short-iso-precise journal line.
func journalTime(line []byte) (time.Time, bool) {
	f, _, _ := bytes.Cut(line, []byte(" "))
	t, err := time.Parse("2006-01-02T15:04:05.999999-0700", string(f))
	return t, err == nil
}

// journalWindow holds back the first line of journalctl's output until the
// context before it has been fed to the redactor.
type journalWindow struct {
	dst     io.Writer
	context func(first []byte)
	buf     []byte
	started bool
}

func (j *journalWindow) Write(p []byte) (int, error) {
	if j.started {
		return j.dst.Write(p)
	}
	j.buf = append(j.buf, p...)
	i := bytes.IndexByte(j.buf, '\n')
	if i < 0 && len(j.buf) < 64<<10 {
		return len(p), nil
	}
	if i < 0 {
		i = len(j.buf)
	}
	j.started = true
	j.context(j.buf[:i])
	if _, err := j.dst.Write(j.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is held back (output without a newline).
func (j *journalWindow) Close() error {
	if j.started || len(j.buf) == 0 {
		return nil
	}
	j.started = true
	j.context(j.buf)
	_, err := j.dst.Write(j.buf)
	return err
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
