package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"nodemend.dev/nodemend/internal/childproc"
)

// Process is one child of the simulation. Its output goes to
// <dir>/logs/<name>.log, and it dies with the simulation even when the
// simulation itself is killed (parent-death signal), so no run leaves
// processes behind.
type Process struct {
	Name string
	Log  string
	// logStart is the log's size when this process started: a restarted
	// component appends to the log of its predecessor.
	logStart int64

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// ended is set when the simulation ends the process on purpose, so
	// that its exit is not reported as a failure.
	ended atomic.Bool
}

// startProcess starts bin with args and extra environment.
func startProcess(logDir, name, bin string, args, env []string) (*Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var logStart int64
	if st, err := out.Stat(); err == nil {
		logStart = st.Size()
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, logStart: logStart, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end (SIGTERM) and kills it after grace.
func (p *Process) Stop(grace time.Duration) {
	p.ended.Store(true)
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Logged reports whether the process has written substr to its log.
func (p *Process) Logged(substr string) (bool, error) {
	f, err := os.Open(p.Log)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.Seek(p.logStart, io.SeekStart); err != nil {
		return false, err
	}
	b, err := io.ReadAll(f)
	return bytes.Contains(b, []byte(substr)), err
}

// Kill ends the process at once, as a crash or a node failure would.
func (p *Process) Kill() {
	p.ended.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// processes is the set of running children, stopped in reverse start order.
type processes struct {
	mu   sync.Mutex
	list []*Process
}

func (ps *processes) add(p *Process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
}

func (ps *processes) stopAll(grace time.Duration) {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].Stop(grace)
	}
}

// exitedEarly returns an error naming the first process that ended while
// it should run, with the end of its log.
func (ps *processes) exitedEarly() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var errs []error
	for _, p := range ps.list {
		if exited, err := p.Exited(); exited && !p.ended.Load() {
			errs = append(errs, fmt.Errorf("%s exited (%v); see %s:\n%s", p.Name, err, p.Log, logTail(p.Log, 15)))
		}
	}
	return errors.Join(errs...)
}
