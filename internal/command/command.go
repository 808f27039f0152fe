// Package command runs the host tools that diagnostics call (journalctl,
// iptables-save, nft, ss, df, nvidia-smi, ...) behind a small interface, so
// that tests script their outputs. Commands are started directly, never
// through a shell.
package command

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"nodemend.dev/nodemend/internal/childproc"
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
	// Root, when set, runs the tools of another root filesystem: the
	// host's, mounted into the agent's container; Run starts the tool
	// chrooted into Root, so that it loads its own libraries. Unset, the
	// tools are the agent's own filesystem's ("/"). Either way LookPath
	// searches the standard PATH directories (childproc.ToolDirs) under the
	// root, resolving symbolic links as inside it, and a tool that a user
	// other than root could have written — or its interpreter, loader,
	// libraries, or a directory on the way to one of them — is refused
	// (ErrUntrusted; childproc.LookPathInRoot): the agent runs it as root.
	Root string
}

// LookPath implements Runner.
func (e Exec) LookPath(name string) (string, error) { return childproc.LookPathInRoot(e.Root, name) }

const stderrKeep = 1024

// Run implements Runner.
func (e Exec) Run(ctx context.Context, name string, args []string, stdout io.Writer) error {
	path, err := childproc.LookPathInRoot(e.Root, name)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	if e.Root != "" {
		if err := childproc.InRoot(cmd, e.Root); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	cmd.Stdout = stdout
	stderr := &childproc.Tail{Keep: stderrKeep}
	cmd.Stderr = stderr
	cmd.Env = e.Env
	if cmd.Env == nil {
		cmd.Env = []string{"LC_ALL=C", "PATH=" + strings.Join(childproc.ToolDirs, ":")}
	}
	// On cancel, ask first (tcpdump flushes its last chunk on SIGTERM); kill
	// after WaitDelay, and do not wait for a grandchild holding the pipes.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Second
	childproc.DieWithParent(cmd)
	err = cmd.Run()
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

// Errors of LookPath: ErrNotInstalled for a tool that is not there (for
// Script, every unscripted tool), ErrUntrusted for a tool that a user other
// than root could have written, or what it runs or loads (Exec).
var (
	ErrNotInstalled = childproc.ErrNotFound
	ErrUntrusted    = childproc.ErrUntrusted
)
