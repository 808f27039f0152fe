package sim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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

	cmd  *exec.Cmd
	done chan struct{}
	err  error
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
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
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

// Kill ends the process at once, as a crash or a node failure would.
func (p *Process) Kill() {
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
		if exited, err := p.Exited(); exited {
			errs = append(errs, fmt.Errorf("%s exited (%v); see %s:\n%s", p.Name, err, p.Log, logTail(p.Log, 15)))
		}
	}
	return errors.Join(errs...)
}
