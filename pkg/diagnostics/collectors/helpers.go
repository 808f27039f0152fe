package collectors

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
)

// hostPath is rel (slash-separated, relative to the host's /) under the
// host root.
func (e *Env) hostPath(rel string) string {
	return filepath.Join(e.HostRoot, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
}

// glob expands host-relative patterns to the host-relative paths of the
// regular files they match, sorted, without duplicates.
func (e *Env) glob(patterns ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range patterns {
		matches, _ := filepath.Glob(e.hostPath(p))
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			rel, err := filepath.Rel(e.HostRoot, m)
			if err != nil || seen[rel] {
				continue
			}
			seen[rel] = true
			out = append(out, filepath.ToSlash(rel))
		}
	}
	sort.Strings(out)
	return out
}

// filesCollector copies the host files matching patterns (under their host
// path in the category directory), keeping the last tail bytes of each.
// No match at all is a skip, not an error.
func filesCollector(e *Env, category, name string, tail int64, patterns ...string) collect.Collector {
	return filesCollectorExcept(e, category, name, tail, nil, patterns...)
}

// filesCollectorExcept is filesCollector without the host paths in except
// (collected elsewhere).
func filesCollectorExcept(e *Env, category, name string, tail int64, except []string, patterns ...string) collect.Collector {
	return collect.Collector{Name: category + "/" + name, Category: category, Run: func(ctx context.Context, out *collect.Output) error {
		var paths []string
		for _, p := range e.glob(patterns...) {
			if !slices.Contains(except, p) {
				paths = append(paths, p)
			}
		}
		if len(paths) == 0 {
			return collect.Skip("none of %s present", strings.Join(patterns, ", "))
		}
		var errs []error
		for _, rel := range paths {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := copyHostFile(ctx, out, rel, e.hostPath(rel), tail); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}}
}

// copyHostFile copies the end of a host file into the bundle as rel. Files
// of /proc and /sys report size 0 and are read to their end (bounded by the
// per-file limit).
func copyHostFile(ctx context.Context, out *collect.Output, rel, path string, tail int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	dst, err := out.Create(rel)
	if err != nil {
		return err
	}
	dst.SetSource("/" + rel)
	var src io.Reader = f
	if size := st.Size(); size > 0 {
		if tail > 0 && size > tail {
			br, kept, err := tailWindow(f, size, tail, dst)
			if err != nil {
				dst.Close()
				return err
			}
			dst.Note(fmt.Sprintf("last %s of %s", bytecount.Human(kept), bytecount.Human(size)))
			src = io.LimitReader(br, kept)
		} else {
			// A log that grows while it is copied is copied as it was.
			src = io.LimitReader(f, size)
		}
	}
	_, err = io.Copy(dst, ctxReader{ctx, src})
	if errors.Is(err, collect.ErrFileLimit) {
		err = nil
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	return nil
}

// tailWindow positions f at the first whole line of its last tail bytes and
// feeds what comes before (redact.ContextBytes of it, from a line start) to
// the redactor as context: a key block or a YAML block under a secret key
// that the window cuts into is still masked. It returns the reader of the
// window and the window's size.
func tailWindow(f *os.File, size, tail int64, dst *collect.File) (*bufio.Reader, int64, error) {
	start := size - tail
	ctxStart := max(0, start-redact.ContextBytes)
	if _, err := f.Seek(ctxStart, io.SeekStart); err != nil {
		return nil, 0, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	ctx := make([]byte, start-ctxStart, start-ctxStart+4096)
	if _, err := io.ReadFull(br, ctx); err != nil {
		return nil, 0, err
	}
	// The window starts on a whole line: the line cut by its start goes to
	// the context.
	for {
		part, err := br.ReadSlice('\n')
		ctx = append(ctx, part...)
		if err != bufio.ErrBufferFull {
			break
		}
	}
	kept := size - ctxStart - int64(len(ctx))
	if ctxStart > 0 {
		// The context itself starts on a whole line.
		if i := bytes.IndexByte(ctx, '\n'); i >= 0 {
			ctx = ctx[i+1:]
		}
	}
	if err := dst.Context(ctx); err != nil {
		return nil, 0, err
	}
	return br, max(kept, 0), nil
}

// ctxReader stops a long copy when the collector's time is up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// commandCollector runs a tool and keeps its output; a tool that is not
// installed is a skip.
func commandCollector(e *Env, category, name, file, tool string, args ...string) collect.Collector {
	return collect.Collector{Name: category + "/" + name, Category: category, Run: func(ctx context.Context, out *collect.Output) error {
		return runTool(ctx, e, out, file, tool, args...)
	}}
}

func runTool(ctx context.Context, e *Env, out *collect.Output, file, tool string, args ...string) error {
	return runToolWith(ctx, e, out, file, nil, tool, args...)
}

// runToolWith is runTool with the tool's output going through wrap(file)
// (nil: straight into the file); a wrapper that is an io.Closer is closed
// when the tool ends.
func runToolWith(ctx context.Context, e *Env, out *collect.Output, file string, wrap func(*collect.File) io.Writer, tool string, args ...string) error {
	if _, err := e.Commands.LookPath(tool); err != nil {
		return collect.Skip("%s not installed", tool)
	}
	dst, err := out.Create(file)
	if err != nil {
		return err
	}
	dst.SetSource(strings.Join(append([]string{tool}, args...), " "))
	var w io.Writer = dst
	if wrap != nil {
		w = wrap(dst)
	}
	err = e.Commands.Run(ctx, tool, args, w)
	if c, ok := w.(io.Closer); ok && w != io.Writer(dst) {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	if dst.Full() {
		err = nil // cut at the per-file limit, noted in the manifest
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// readHost reads a small host file (a /proc or /sys value).
func (e *Env) readHost(rel string) (string, error) {
	b, err := os.ReadFile(e.hostPath(rel))
	return strings.TrimSpace(string(b)), err
}

// isNotExist reports a missing file, also behind a wrapped error.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// table formats rows as aligned columns.
func table(header []string, rows [][]string) []byte {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(w) && len(c) > w[i] {
				w[i] = len(c)
			}
		}
	}
	var b bytes.Buffer
	line := func(r []string) {
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s  ", w[i], c)
			}
		}
		b.WriteByte('\n')
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return b.Bytes()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
