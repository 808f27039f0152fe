package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is a process the node started and outlives the command that
// started it: its PID file records the PID with the process's start time,
// so a later stop never signals a recycled PID of another program.
type daemon struct {
	Name  string `json:"name"`
	Pid   int    `json:"pid"`
	Start uint64 `json:"startTicks"`
	Bin   string `json:"bin"`
}

func (l Layout) pidFile(name string) string { return filepath.Join(l.pidDir(), name+".json") }

// startDaemon starts bin in a session of its own, output appended to
// logs/<name>.log, and records it.
func (l Layout) startDaemon(name, bin string, args ...string) (daemon, error) {
	if err := os.MkdirAll(l.LogDir(), 0o755); err != nil {
		return daemon{}, err
	}
	if err := os.MkdirAll(l.pidDir(), 0o755); err != nil {
		return daemon{}, err
	}
	logf, err := os.OpenFile(filepath.Join(l.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return daemon{}, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a terminal's ^C or the end of the starting shell
	// does not reach it; only stop does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return daemon{}, fmt.Errorf("starting %s: %w", name, err)
	}
	d := daemon{Name: name, Pid: cmd.Process.Pid, Bin: bin}
	d.Start, err = startTicks(d.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return daemon{}, fmt.Errorf("%s exited at once; see %s", name, filepath.Join(l.LogDir(), name+".log"))
	}
	_ = cmd.Process.Release()
	data, _ := json.Marshal(d)
	if err := os.WriteFile(l.pidFile(name), data, 0o644); err != nil {
		_ = syscall.Kill(d.Pid, syscall.SIGKILL)
		return daemon{}, err
	}
	return d, nil
}

// recorded reads a daemon's PID file; ok is false when there is none.
func (l Layout) recorded(name string) (d daemon, ok bool, err error) {
	data, err := os.ReadFile(l.pidFile(name))
	if errors.Is(err, os.ErrNotExist) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return d, false, fmt.Errorf("%s: %w", l.pidFile(name), err)
	}
	return d, true, nil
}

// alive reports whether the recorded process still runs (same PID, same
// start time; a zombie counts as gone).
func (d daemon) alive() bool {
	t, err := startTicks(d.Pid)
	return err == nil && t == d.Start
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the
// process to go.
func (d daemon) stop(grace time.Duration) {
	if !d.alive() {
		return
	}
	_ = syscall.Kill(d.Pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for d.alive() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if d.alive() {
		_ = syscall.Kill(d.Pid, syscall.SIGKILL)
		for i := 0; i < 50 && d.alive(); i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// startTicks is field 22 of /proc/<pid>/stat (start time since boot, in
// clock ticks). A zombie or a missing process is an error.
func startTicks(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStartTicks(string(data))
}

func parseStartTicks(stat string) (uint64, error) {
	// comm (field 2) may hold spaces and parentheses: fields restart after
	// the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errors.New("process exited")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// closeInheritedFDs marks every descriptor above stderr close-on-exec, so
// that no daemon holds what the starting command inherited (a flock(1)
// lock among them: the caller's lock is the caller's).
func closeInheritedFDs() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
