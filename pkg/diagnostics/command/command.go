// Package command runs the host tools that diagnostics call (journalctl,
// iptables-save, nft, ss, df, nvidia-smi, ...) behind a small interface, so
// that tests script their outputs. Commands are started directly, never
// through a shell.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"nodemend.dev/nodemend/internal/childproc"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Runner runs commands.
type Runner interface {
	// LookPath reports where a tool is installed, or an error when it is not.
	LookPath(name string) (string, error)
	// Run runs name with args and writes its standard output to stdout. The
	// tail of its standard error is part of a returned error. It returns
	// when the command ends or ctx is done (the process is then killed).
	Run(ctx context.Context, name string, args []string, stdout io.Writer) error
}

// Exec runs real processes.
type Exec struct {
	// Env is the environment of the commands; nil means only LC_ALL=C and
	// PATH, so that the agent's own environment (credentials) is not passed
	// on and outputs are not localized.
	Env []string
}

// LookPath implements Runner.
func (Exec) LookPath(name string) (string, error) { return exec.LookPath(name) }

const stderrKeep = 1024

// Run implements Runner.
func (e Exec) Run(ctx context.Context, name string, args []string, stdout io.Writer) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = stdout
	stderr := &childproc.Tail{Keep: stderrKeep}
	cmd.Stderr = stderr
	cmd.Env = e.Env
	if cmd.Env == nil {
		cmd.Env = []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	// On cancel, ask first (tcpdump flushes its last chunk on SIGTERM); kill
	// after WaitDelay, and do not wait for a grandchild holding the pipes.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Second
	childproc.DieWithParent(cmd)
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", name, ctx.Err())
	}
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ErrNotInstalled is what Script's LookPath returns for unknown tools.
var ErrNotInstalled = errors.New("not installed")
