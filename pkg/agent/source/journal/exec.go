package journal

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
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
	p := &execProcess{cmd: cmd, stdout: stdout}
	cmd.Stderr = &p.stderr
	// After the kill on cancel, do not wait forever for a grandchild holding
	// the pipes open.
	cmd.WaitDelay = 5 * time.Second
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

type execProcess struct {
	cmd    *exec.Cmd
	stdout io.Reader
	stderr tailBuffer
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

// tailBuffer keeps the last stderrKeep bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - stderrKeep; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
