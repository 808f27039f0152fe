package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

func (m *Monitor) procDir() string { return filepath.Join(m.env.HostRoot, "proc") }

// --- ApproachingKernelPidMax -------------------------------------------------

// pidUsage is the input of the pid_max check.
type pidUsage struct {
	// Tasks is the number of processes and threads: the total after the slash
	// in the 4th field of /proc/loadavg (the kernel's nr_threads).
	Tasks uint64
	// PIDMax is kernel.pid_max, ThreadsMax kernel.threads-max. Either one
	// stops fork/clone when reached.
	PIDMax     uint64
	ThreadsMax uint64
}

func (m *Monitor) runPIDMax(context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonApproachingKernelPidMax
	thr, err := percentThreshold(reason, m.threshold(reason))
	if err != nil {
		return nil, err
	}
	fs, err := procfs.NewFS(m.procDir())
	if err != nil {
		return nil, err
	}
	path := filepath.Join(m.procDir(), "loadavg")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var u pidUsage
	if u.Tasks, err = parseLoadavgTasks(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if u.PIDMax, err = sysctlUint(fs, "kernel.pid_max"); err != nil {
		return nil, err
	}
	if u.ThreadsMax, err = sysctlUint(fs, "kernel.threads-max"); err != nil {
		return nil, err
	}
	return evalPIDMax(u, thr, m.env.Clock.Now())
}

// parseLoadavgTasks returns the total number of tasks from /proc/loadavg:
// "0.52 0.58 0.59 3/1234 56789" → 1234.
func parseLoadavgTasks(data []byte) (uint64, error) {
	fields := strings.Fields(string(data))
	if len(fields) != 5 {
		return 0, fmt.Errorf("malformed loadavg %q: want 5 fields", textcut.Ellipsis(string(data), quoteLimit))
	}
	_, total, ok := strings.Cut(fields[3], "/")
	if !ok {
		return 0, fmt.Errorf("malformed loadavg %q: no running/total tasks field", textcut.Ellipsis(string(data), quoteLimit))
	}
	n, err := strconv.ParseUint(total, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed loadavg task count %q: %w", total, err)
	}
	return n, nil
}

// evalPIDMax reports ApproachingKernelPidMax when the tasks use at least
// threshold percent of the lower of kernel.pid_max and kernel.threads-max.
func evalPIDMax(u pidUsage, threshold float64, now time.Time) ([]detection.Finding, error) {
	if u.PIDMax == 0 || u.ThreadsMax == 0 {
		return nil, fmt.Errorf("invalid task limits: kernel.pid_max %d, kernel.threads-max %d", u.PIDMax, u.ThreadsMax)
	}
	limit, name := u.PIDMax, "kernel.pid_max"
	if u.ThreadsMax < limit {
		limit, name = u.ThreadsMax, "kernel.threads-max"
	}
	if !reached(u.Tasks, limit, threshold) {
		return nil, nil
	}
	pct := percent(u.Tasks, limit)
	return []detection.Finding{{
		Reason: health.ReasonApproachingKernelPidMax,
		Message: fmt.Sprintf("%d tasks (processes and threads) use %.1f%% of %s %d (kernel.pid_max %d, kernel.threads-max %d); threshold %g%%",
			u.Tasks, pct, name, limit, u.PIDMax, u.ThreadsMax, threshold),
		Observed: now,
	}}, nil
}

// --- ApproachingMaxOpenFiles -------------------------------------------------

// fileHandles is /proc/sys/fs/file-nr: allocated handles, allocated but
// unused ones (always 0 since Linux 2.6), and the maximum (fs.file-max).
type fileHandles struct {
	Allocated, Free, Max uint64
}

func (m *Monitor) runOpenFiles(context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonApproachingMaxOpenFiles
	thr, err := percentThreshold(reason, m.threshold(reason))
	if err != nil {
		return nil, err
	}
	fs, err := procfs.NewFS(m.procDir())
	if err != nil {
		return nil, err
	}
	fields, err := fs.SysctlStrings("fs.file-nr")
	if err != nil {
		return nil, err
	}
	h, err := parseFileNr(fields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(m.procDir(), "sys/fs/file-nr"), err)
	}
	return evalOpenFiles(h, thr, m.env.Clock.Now())
}

// parseFileNr parses the three fields of /proc/sys/fs/file-nr.
func parseFileNr(fields []string) (fileHandles, error) {
	if len(fields) != 3 {
		return fileHandles{}, fmt.Errorf("malformed file-nr %q: want 3 fields", strings.Join(fields, " "))
	}
	var v [3]uint64
	for i, f := range fields {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return fileHandles{}, fmt.Errorf("malformed file-nr field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return fileHandles{Allocated: v[0], Free: v[1], Max: v[2]}, nil
}

// evalOpenFiles reports ApproachingMaxOpenFiles when the handles in use
// (allocated - free) reach threshold percent of the maximum.
func evalOpenFiles(h fileHandles, threshold float64, now time.Time) ([]detection.Finding, error) {
	if h.Max == 0 {
		return nil, errors.New("invalid file-nr: maximum is 0")
	}
	if h.Free > h.Allocated {
		return nil, fmt.Errorf("invalid file-nr: %d free of %d allocated", h.Free, h.Allocated)
	}
	used := h.Allocated - h.Free
	if !reached(used, h.Max, threshold) {
		return nil, nil
	}
	pct := percent(used, h.Max)
	return []detection.Finding{{
		Reason: health.ReasonApproachingMaxOpenFiles,
		Message: fmt.Sprintf("%d file handles in use, %.1f%% of fs.file-max %d; threshold %g%%",
			used, pct, h.Max, threshold),
		Observed: now,
	}}, nil
}

// --- ExcessiveZombieProcesses ------------------------------------------------

// processScan is what the zombie check gathers from /proc.
type processScan struct {
	Processes int
	Zombies   int
	// ZombieParents counts zombies by parent PID: the parent is the process
	// that does not reap them.
	ZombieParents map[int]int
}

func (m *Monitor) runZombies(context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonExcessiveZombieProcesses
	thr := m.threshold(reason)
	if math.IsNaN(thr) || thr < 1 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a count of at least 1", reason, thr)
	}
	scan, err := scanProcesses(m.procDir())
	if err != nil {
		return nil, err
	}
	return evalZombies(scan, thr, m.env.Clock.Now()), nil
}

// statBufSize bounds the read of /proc/<pid>/stat: the state and the parent
// follow the command name, at most 64 bytes on current kernels.
const statBufSize = 512

// scanProcesses counts the processes of procDir and the zombies among them.
// It reads the directory and one stat file per process and nothing else: on a
// node with 5,000 processes it costs 5,000 open/read/close triples. A process
// that exits during the scan is skipped; any other error fails the scan.
func scanProcesses(procDir string) (processScan, error) {
	dir, err := os.Open(procDir)
	if err != nil {
		return processScan{}, err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	scan := processScan{ZombieParents: map[int]int{}}
	buf := make([]byte, statBufSize)
	for {
		names, rerr := dir.Readdirnames(1024)
		for _, name := range names {
			if !isPID(name) {
				continue
			}
			stat, ok, err := readStat(dfd, name, buf)
			if err != nil {
				return processScan{}, fmt.Errorf("%s: %w", filepath.Join(procDir, name, "stat"), err)
			}
			if !ok {
				continue // exited meanwhile
			}
			state, ppid, err := parseStatState(stat)
			if err != nil {
				return processScan{}, fmt.Errorf("%s: %w", filepath.Join(procDir, name, "stat"), err)
			}
			scan.Processes++
			if state == 'Z' {
				scan.Zombies++
				scan.ZombieParents[ppid]++
			}
		}
		if rerr == io.EOF {
			return scan, nil
		}
		if rerr != nil {
			return processScan{}, rerr
		}
	}
}

// readStat reads <dfd>/<pid>/stat into buf. ok is false when the process is
// gone (it exited between the directory read and the open or the read).
func readStat(dfd int, pid string, buf []byte) (stat []byte, ok bool, err error) {
	fd, err := unix.Openat(dfd, pid+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, false, nil
		}
		return nil, false, err
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if n <= 0 {
		return nil, false, nil
	}
	return buf[:n], true, nil
}

func isPID(name string) bool {
	if name == "" || name[0] == '0' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return true
}

// parseStatState returns the state and parent PID of a /proc/<pid>/stat
// line: "1234 (comm) S 1 ...". The command name may contain spaces and
// parentheses, so it ends at the last ')'.
func parseStatState(stat []byte) (state byte, ppid int, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || bytes.IndexByte(stat, '(') < 0 {
		return 0, 0, fmt.Errorf("malformed stat %q: no (comm)", textcut.Ellipsis(string(stat), quoteLimit))
	}
	rest := stat[i+1:]
	// rest is " S 1 1 ...": a space, the state letter, a space, the parent.
	if len(rest) < 4 || rest[0] != ' ' || rest[2] != ' ' || !isStateLetter(rest[1]) {
		return 0, 0, fmt.Errorf("malformed stat %q: no state after (comm)", textcut.Ellipsis(string(stat), quoteLimit))
	}
	ppidField := rest[3:]
	if j := bytes.IndexByte(ppidField, ' '); j >= 0 {
		ppidField = ppidField[:j]
	}
	ppid, err = strconv.Atoi(string(bytes.TrimRight(ppidField, "\n")))
	if err != nil || ppid < 0 {
		return 0, 0, fmt.Errorf("malformed stat %q: bad parent PID", textcut.Ellipsis(string(stat), quoteLimit))
	}
	return rest[1], ppid, nil
}

func isStateLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// evalZombies reports ExcessiveZombieProcesses when at least threshold
// processes are zombies, naming the parent that holds the most of them.
func evalZombies(s processScan, threshold float64, now time.Time) []detection.Finding {
	if float64(s.Zombies) < threshold {
		return nil
	}
	top, topN := 0, 0
	for ppid, n := range s.ZombieParents {
		if n > topN || n == topN && ppid < top {
			top, topN = ppid, n
		}
	}
	msg := fmt.Sprintf("%d of %d processes are zombies (threshold %g)", s.Zombies, s.Processes, threshold)
	if topN > 0 {
		msg += fmt.Sprintf("; %d of them are children of PID %d, which does not reap them", topN, top)
	}
	return []detection.Finding{{
		Reason:   health.ReasonExcessiveZombieProcesses,
		Message:  msg,
		Observed: now,
	}}
}

// --- helpers -----------------------------------------------------------------

// sysctlUint reads a single unsigned sysctl value under <proc>/sys.
func sysctlUint(fs procfs.FS, name string) (uint64, error) {
	fields, err := fs.SysctlStrings(name)
	if err != nil {
		return 0, err
	}
	if len(fields) != 1 {
		return 0, fmt.Errorf("malformed sysctl %s %q: want one value", name, strings.Join(fields, " "))
	}
	v, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed sysctl %s: %w", name, err)
	}
	return v, nil
}

func percentThreshold(reason string, thr float64) (float64, error) {
	if math.IsNaN(thr) || thr <= 0 || thr > 100 {
		return 0, fmt.Errorf("%s: invalid threshold %v: want a percentage in (0, 100]", reason, thr)
	}
	return thr, nil
}

func percent(n, of uint64) float64 { return float64(n) / float64(of) * 100 }

// reached reports whether n is at least threshold percent of limit, compared
// as n*100 >= threshold*limit so that 70000 of 100000 is exactly 70%.
func reached(n, limit uint64, threshold float64) bool {
	return float64(n)*100 >= threshold*float64(limit)
}

// quoteLimit bounds the bad input an error message quotes: 80 bytes and the
// cut mark.
const quoteLimit = 80 + len(textcut.Mark)
