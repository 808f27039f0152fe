package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// when ctx ends, and when the agent dies.
func Output(ctx context.Context, t Tool) ([]byte, error) {
	name := filepath.Base(t.Path)
	cmd := exec.CommandContext(ctx, t.Path, t.Args...)
	cmd.Env = toolEnv
	out := &limitedBuffer{limit: t.Limit}
	stderr := &Tail{Keep: 1024}
	cmd.Stdout, cmd.Stderr = out, stderr
	cmd.WaitDelay = 2 * time.Second
	DieWithParent(cmd)
	if t.Root != "" && t.Root != "/" {
		chroot(cmd, t.Root)
		cmd.Dir = "/"
	}
	err := cmd.Run()
	switch {
	case out.over:
		return nil, fmt.Errorf("%s: %w (%d bytes)", name, ErrOutputTooLarge, t.Limit)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", name, ctx.Err())
	case err != nil:
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out.Bytes(), nil
}

// limitedBuffer keeps at most limit bytes (0: no limit) and remembers that
// more came.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.limit > 0 && b.Len()+len(p) > b.limit {
		b.over = true
		return 0, ErrOutputTooLarge
	}
	return b.Buffer.Write(p)
}
