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

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- LargeEnvironment --------------------------------------------------------

// environScan is what the environment check gathers from /proc: the number
// of environment variables of each process that has more than the limit.
type environScan struct {
	Processes int
	// Unreadable counts processes whose environ could not be read for lack
	// of permission (the agent without CAP_SYS_PTRACE).
	Unreadable int
	// Large are the processes above the limit.
	Large []largeEnv
}

type largeEnv struct {
	PID       int
	Comm      string
	Variables int
}

// maxEnvironRead bounds the read of one /proc/PID/environ. The kernel caps
// the environment with the argument strings at a quarter of the stack limit
// (6 MiB with the usual 8 MiB, more with a raised one); a process past this
// bound is counted with what was read, which is far above any threshold.
const maxEnvironRead = 8 << 20

func (m *Monitor) runEnviron(context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonLargeEnvironment
	thr := m.threshold(reason)
	if math.IsNaN(thr) || thr < 1 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a count of at least 1", reason, thr)
	}
	scan, err := scanEnvirons(m.procDir(), int(math.Min(thr, math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	if scan.Processes > 0 && scan.Unreadable == scan.Processes {
		return nil, fmt.Errorf("%s: no process's environ is readable (the agent needs CAP_SYS_PTRACE)", m.procDir())
	}
	return evalEnviron(scan, thr, m.env.Clock.Now()), nil
}

// scanEnvirons counts the environment variables of every process of
// procDir and keeps those with more than limit. A process that exits during
// the scan is skipped; one whose environ is refused is counted as unreadable.
func scanEnvirons(procDir string, limit int) (environScan, error) {
	dir, err := os.Open(procDir)
	if err != nil {
		return environScan{}, err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	var scan environScan
	buf := make([]byte, 64<<10)
	for {
		names, rerr := dir.Readdirnames(1024)
		for _, name := range names {
			if !isPID(name) {
				continue
			}
			n, err := countEnviron(dfd, name, buf)
			switch {
			case errors.Is(err, errGone):
				continue
			case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
				scan.Processes++
				scan.Unreadable++
				continue
			case err != nil:
				return environScan{}, fmt.Errorf("%s: %w", filepath.Join(procDir, name, "environ"), err)
			}
			scan.Processes++
			if n > limit {
				pid, _ := strconv.Atoi(name)
				scan.Large = append(scan.Large, largeEnv{PID: pid, Comm: readComm(dfd, name), Variables: n})
			}
		}
		if rerr == io.EOF {
			return scan, nil
		}
		if rerr != nil {
			return environScan{}, rerr
		}
	}
}

var errGone = errors.New("process exited")

// countEnviron counts the non-empty NUL-terminated strings of
// <dfd>/<pid>/environ (environ(7)); a last string without its NUL counts too.
func countEnviron(dfd int, pid string, buf []byte) (int, error) {
	fd, err := unix.Openat(dfd, pid+"/environ", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return 0, errGone
		}
		return 0, err
	}
	defer unix.Close(fd)
	count, read := 0, 0
	prev := byte(0) // the byte before the chunk: NUL means "at a string start"
	for read < maxEnvironRead {
		n, err := unix.Read(fd, buf)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return 0, errGone
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, err
		}
		if n == 0 {
			break
		}
		chunk := buf[:n]
		read += n
		// A string ends at each NUL that follows a non-NUL byte.
		for i := 0; i < len(chunk); {
			j := bytes.IndexByte(chunk[i:], 0)
			if j < 0 {
				prev = chunk[len(chunk)-1]
				break
			}
			if j > 0 || (i == 0 && prev != 0) {
				count++
			}
			i += j + 1
			prev = 0
		}
	}
	if prev != 0 {
		count++ // a last string without its NUL
	}
	return count, nil
}

// readComm returns <dfd>/<pid>/comm, "" when it cannot be read.
func readComm(dfd int, pid string) string {
	fd, err := unix.Openat(dfd, pid+"/comm", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var b [64]byte
	n, err := unix.Read(fd, b[:])
	if err != nil || n <= 0 {
		return ""
	}
	return strings.TrimRight(string(b[:n]), "\n")
}

// evalEnviron reports LargeEnvironment when some process has more than
// threshold environment variables, naming the largest and how many others.
// One finding for the node: the cause (a namespace full of Services with
// service links on) usually shows in many processes at once.
func evalEnviron(s environScan, threshold float64, now time.Time) []detection.Finding {
	if len(s.Large) == 0 {
		return nil
	}
	top := s.Large[0]
	for _, p := range s.Large[1:] {
		if p.Variables > top.Variables || p.Variables == top.Variables && p.PID < top.PID {
			top = p
		}
	}
	name := top.Comm
	if name == "" {
		name = "?"
	}
	msg := fmt.Sprintf("PID %d (%s) has %d environment variables (threshold %g)", top.PID, name, top.Variables, threshold)
	if n := len(s.Large) - 1; n > 0 {
		msg += fmt.Sprintf(", and %d more processes have more than the threshold", n)
	}
	msg += "; for pods, check the namespace's Service count and set enableServiceLinks: false"
	return []detection.Finding{{Reason: health.ReasonLargeEnvironment, Message: msg, Observed: now}}
}
