package childproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Tool is a host tool run for its standard output by a periodic check
// (xfs_db, iptables-save).
type Tool struct {
	// Path is the program, absolute. With Root set it is a path inside Root.
	Path string
	Args []string
	// Root, when set, is the directory the tool runs chrooted in: the host
	// root, so that the host's own binary runs against the host's files
	// and libraries (its version matches the host's kernel features).
	Root string
	// Limit caps the standard output kept; more is an error, so that a
	// tool printing without end cannot grow the agent.
	Limit int
}

// toolEnv is the tools' environment: none of the agent's (credentials), a
// PATH for the tools' own helpers, and untranslated output to parse.
var toolEnv = []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// ErrOutputTooLarge is returned when a tool writes more than its Limit.
var ErrOutputTooLarge = errors.New("output larger than the limit")

// Output runs t and returns its standard output. A non-zero exit is an
// error carrying the end of the tool's standard error. The tool is killed
// when ctx ends, and when the agent dies. A tool CheckTrust refuses is not
// started (ErrUntrusted).
func Output(ctx context.Context, t Tool) ([]byte, error) {
	cmd, stderr, err := command(ctx, t)
	if err != nil {
		return nil, err
	}
	out := &LimitedBuffer{Limit: t.Limit}
	cmd.Stdout = out
	err = cmd.Run()
	if out.Over() {
		return nil, fmt.Errorf("%s: %w (%d bytes)", filepath.Base(t.Path), ErrOutputTooLarge, t.Limit)
	}
	if err := toolError(ctx, t, err, stderr); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// command prepares t: its trust checked (it runs as root), its
// environment, its standard error kept to explain a failure, its death with
// the agent, its chroot.
func command(ctx context.Context, t Tool) (*exec.Cmd, *Tail, error) {
	root := t.Root
	if root == "" {
		root = "/"
	}
	if err := CheckTrust(root, t.Path); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Base(t.Path), err)
	}
	cmd := exec.CommandContext(ctx, t.Path, t.Args...)
	cmd.Env = toolEnv
	stderr := &Tail{Keep: 1024}
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	DieWithParent(cmd)
	if t.Root != "" && t.Root != "/" {
		chroot(cmd, t.Root)
		cmd.Dir = "/"
	}
	return cmd, stderr, nil
}

// toolError names the tool in err: the context's end, or the exit status
// with the end of its standard error.
func toolError(ctx context.Context, t Tool, err error, stderr *Tail) error {
	name := filepath.Base(t.Path)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", name, ctx.Err())
	case err == nil:
		return nil
	case strings.TrimSpace(stderr.String()) != "":
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return fmt.Errorf("%s: %w", name, err)
}

// LimitedBuffer keeps a child's output up to Limit bytes (0: no limit);
// a write past it fails, which ends the copy of the child's output, and
// Over says so. It has no ReadFrom or WriteString (the buffer is a field,
// not embedded), so that io.Copy and every writer go through Write and the
// limit.
type LimitedBuffer struct {
	Limit int
	buf   bytes.Buffer
	over  bool
}

func (b *LimitedBuffer) Write(p []byte) (int, error) {
	if b.Limit > 0 && b.buf.Len()+len(p) > b.Limit {
		b.over = true
		return 0, ErrOutputTooLarge
	}
	return b.buf.Write(p)
}

// Bytes is what was kept.
func (b *LimitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// Over reports whether a write went past Limit (and was refused).
func (b *LimitedBuffer) Over() bool { return b.over }

// maxLine bounds one line of a tool's output.
const maxLine = 1 << 20

// Lines runs t and calls fn with each line of its standard output, as it
// comes: a large output (a ruleset of a hundred thousand rules) is never
// held whole. Limit caps the total read. A non-zero exit is an error
// carrying the end of the tool's standard error.
func Lines(ctx context.Context, t Tool, fn func(line []byte)) error {
	cmd, stderr, err := command(ctx, t)
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return toolError(ctx, t, err, stderr)
	}
	if err := cmd.Start(); err != nil {
		return toolError(ctx, t, err, stderr)
	}
	var r io.Reader = stdout
	if t.Limit > 0 {
		r = io.LimitReader(stdout, int64(t.Limit)+1)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	read := 0
	for sc.Scan() {
		read += len(sc.Bytes()) + 1
		fn(sc.Bytes())
	}
	scanErr := sc.Err()
	over := t.Limit > 0 && read > t.Limit
	if scanErr != nil || over {
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	switch {
	case over:
		return fmt.Errorf("%s: %w (%d bytes)", filepath.Base(t.Path), ErrOutputTooLarge, t.Limit)
	case scanErr != nil && ctx.Err() == nil:
		return fmt.Errorf("%s: reading its output: %w", filepath.Base(t.Path), scanErr)
	}
	return toolError(ctx, t, waitErr, stderr)
}
