package journal

import (
	"context"
	"fmt"
	"io"
	"nodemend.dev/nodemend/internal/childproc"
	"os/exec"
	"strings"
	"time"
)

// ExecRunner runs journalctl as a child process. The child is killed when
// the context is done (and, on Linux, when the agent dies).
type ExecRunner struct{}

// stderrKeep is how much of the end of journalctl's standard error is kept
// for error messages.
const stderrKeep = 2048

// Start implements Runner.
func (ExecRunner) Start(ctx context.Context, path string, args []string) (Process, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &execProcess{cmd: cmd, stdout: stdout, stderr: &childproc.Tail{Keep: stderrKeep}}
	cmd.Stderr = p.stderr
	// After the kill on cancel, do not wait forever for a grandchild holding
	// the pipes open.
	cmd.WaitDelay = 5 * time.Second
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

type execProcess struct {
	cmd    *exec.Cmd
	stdout io.Reader
	stderr *childproc.Tail
}

func (p *execProcess) Stdout() io.Reader { return p.stdout }

func (p *execProcess) Wait() error {
	err := p.cmd.Wait()
	if msg := strings.TrimSpace(p.stderr.String()); msg != "" {
		if err == nil {
			return fmt.Errorf("exited: %s", msg)
		}
		return fmt.Errorf("%w: %s", err, msg)
	}
	return err
}
