package networking

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// commIs reports whether /proc/<pid>/comm is name.
func commIs(procDir string, pid int, name string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "comm"))
	return err == nil && strings.TrimSuffix(string(b), "\n") == name
}

// findProcesses scans procDir once for processes whose comm is one of names
// and returns a PID for each found. Processes that exit during the scan are
// skipped.
func findProcesses(procDir string, names []string) (map[string]int, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	found := map[string]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil {
			continue // exited meanwhile, or a kernel thread racing us
		}
		comm := strings.TrimSuffix(string(b), "\n")
		if slices.Contains(names, comm) && found[comm] == 0 {
			found[comm] = pid
			if len(found) == len(names) {
				break
			}
		}
	}
	return found, nil
}
