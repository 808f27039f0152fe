package selfpages

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// ErrUnsupported: the kernel has no MADV_PAGEOUT (before Linux 5.4).
var ErrUnsupported = errors.New("madvise(MADV_PAGEOUT) is not supported by this kernel")

// ReleaseExecutable pages out this process's read-only mappings of its own
// executable and returns their size in bytes.
func ReleaseExecutable() (int64, error) {
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat of the executable: unexpected %T", fi.Sys())
	}
	self, err := procfs.Self()
	if err != nil {
		return 0, err
	}
	maps, err := self.ProcMaps()
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, m := range maps {
		if m.Inode != st.Ino || unix.Major(m.Dev) != unix.Major(st.Dev) || unix.Minor(m.Dev) != unix.Minor(st.Dev) ||
			m.Perms == nil || !m.Perms.Read || m.Perms.Write {
			continue // not the executable's file, or written to (data: anonymous once touched)
		}
		n := m.EndAddr - m.StartAddr
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.StartAddr, n, unix.MADV_PAGEOUT); e != 0 {
			if e == unix.EINVAL {
				return advised, ErrUnsupported
			}
			return advised, fmt.Errorf("madvise(MADV_PAGEOUT) of %#x-%#x: %w", m.StartAddr, m.EndAddr, e)
		}
		advised += int64(n)
	}
	if advised == 0 {
		return 0, errors.New("no mapping of the executable found in /proc/self/maps")
	}
	return advised, nil
}
