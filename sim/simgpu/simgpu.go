// Package simgpu is the simulation's NVIDIA GPUs: their state as files in a
// simulated host's root, and a stand-in for the driver's nvidia-smi that
// reads and changes it (sim/cmd/fake-nvidia-smi). The agent on a simulated
// GPU node finds that tool in the host root and runs it chrooted there, as
// it runs the real one on a node whose driver is installed on the host, so
// the ResetAccelerator rung is exercised end to end without a GPU.
//
// The tool answers the forms the agent and its diagnostics use, in
// nvidia-smi's formats (pkg/agent/remediate/testdata holds the real tool's
// outputs): --query-gpu and --query-compute-apps as CSV, --gpu-reset, -i,
// and a short -q. A GPU a fault left needing a reset answers
// "[GPU requires reset]" until it is reset; a process on a GPU makes its
// reset fail as the driver refuses a GPU in use.
//
// Layout under the host root:
//
//	etc/sim-gpu/gpus              the GPUs: "<bus ID> <UUID>" per line (the hardware; kept across reboots)
//	run/sim-gpu/busy              processes on GPUs: "<bus ID>, <pid>, <name>" per line
//	run/sim-gpu/requires-reset    GPUs that answer "[GPU requires reset]", one bus ID per line
//	var/log/sim-gpu-resets.log    one line per reset the tool carried out: the bus IDs it reset
//
// run/sim-gpu is what a boot starts without (Reboot), as /run is on a
// machine.
package simgpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/agent/remediate"
)

const (
	gpusFile    = "etc/sim-gpu/gpus"
	runDir      = "run/sim-gpu"
	busyFile    = runDir + "/busy"
	requiresRst = runDir + "/requires-reset"
	resetLog    = "var/log/sim-gpu-resets.log"
)

// ToolPath is where Install puts the tool in the host root: a directory of
// the agent's tool search path (childproc.ToolDirs).
const ToolPath = "usr/bin/nvidia-smi"

// busIDs are the simulated GPUs' PCI addresses, in nvidia-smi's form; the
// first is the one the e2e tests' XID lines name (PCI:0000:3b:00).
var busIDs = []string{
	"00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0", "00000000:AF:00.0",
	"00000000:18:00.0", "00000000:2A:00.0", "00000000:BA:00.0", "00000000:DB:00.0",
}

// maxGPUs is how many GPUs a simulated host can have.
const maxGPUs = 8

// BusID is the kernel's form ("0000:3b:00.0") of GPU i's address, as the
// driver's kernel messages and the agent's conditions name it.
func BusID(i int) string { return remediate.NormalizeBusID(busIDs[i]) }

// Install gives the host root n GPUs and the stand-in nvidia-smi, copied
// from tool (a static build of sim/cmd/fake-nvidia-smi) and owned by the
// caller with mode 0755, so that the agent trusts it as it trusts a
// driver's tool.
func Install(root string, n int, tool string) error {
	if n < 1 || n > maxGPUs {
		return fmt.Errorf("a simulated host has 1 to %d GPUs, not %d", maxGPUs, n)
	}
	var lines []string
	for i := 0; i < n; i++ {
		lines = append(lines, fmt.Sprintf("%s GPU-5a1d0000-0000-4000-8000-%012x", busIDs[i], i))
	}
	if err := writeLines(root, gpusFile, lines); err != nil {
		return err
	}
	bin, err := os.ReadFile(tool)
	if err != nil {
		return fmt.Errorf("the simulated nvidia-smi: %w (run `make build`)", err)
	}
	return writeAtomic(filepath.Join(root, ToolPath), bin, 0o755)
}

// SetBusy puts a process on the GPU with bus ID bus (either form), as a
// workload holding it; a reset of that GPU then fails as in use.
func SetBusy(root, bus string, pid int, name string) error {
	lines, err := readLines(root, busyFile)
	if err != nil {
		return err
	}
	return writeLines(root, busyFile, append(lines, fmt.Sprintf("%s, %d, %s", toolForm(bus), pid, name)))
}

// RequireReset marks the GPU as a fault leaves it: every query of it
// answers "[GPU requires reset]" until it is reset.
func RequireReset(root, bus string) error {
	lines, err := readLines(root, requiresRst)
	if err != nil {
		return err
	}
	if id := toolForm(bus); !slices.Contains(lines, id) {
		lines = append(lines, id)
	}
	return writeLines(root, requiresRst, lines)
}

// Resets are the resets the tool carried out, oldest first: each the bus
// IDs (kernel form) it reset together.
func Resets(root string) ([][]string, error) {
	lines, err := readLines(root, resetLog)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, l := range lines {
		_, ids, ok := strings.Cut(l, " reset ")
		if !ok {
			continue
		}
		var set []string
		for _, id := range strings.Split(ids, ",") {
			set = append(set, remediate.NormalizeBusID(id))
		}
		out = append(out, set)
	}
	return out, nil
}

// Reboot is what a boot does to the GPUs: no process holds them and every
// GPU is initialised afresh.
func Reboot(root string) error {
	return os.RemoveAll(filepath.Join(root, runDir))
}

// gpu is one GPU of the host as the tool sees it.
type gpu struct {
	index         int
	bus, uuid     string
	requiresReset bool
}

// state is the host's GPUs and the processes on them.
type state struct {
	gpus []gpu
	busy []process
}

type process struct {
	bus, pid, name string
}

func load(root string) (state, error) {
	var s state
	lines, err := readLines(root, gpusFile)
	if err != nil {
		return s, err
	}
	stuck, err := readLines(root, requiresRst)
	if err != nil {
		return s, err
	}
	for i, l := range lines {
		bus, uuid, _ := strings.Cut(l, " ")
		s.gpus = append(s.gpus, gpu{index: i, bus: bus, uuid: uuid, requiresReset: slices.Contains(stuck, bus)})
	}
	busy, err := readLines(root, busyFile)
	if err != nil {
		return s, err
	}
	for _, l := range busy {
		f := strings.SplitN(l, ",", 3)
		if len(f) == 3 {
			s.busy = append(s.busy, process{bus: strings.TrimSpace(f[0]), pid: strings.TrimSpace(f[1]), name: strings.TrimSpace(f[2])})
		}
	}
	return s, nil
}

// resetDone records a reset: the GPUs answer healthy again.
func resetDone(root string, set []gpu, now time.Time) error {
	stuck, err := readLines(root, requiresRst)
	if err != nil {
		return err
	}
	var ids []string
	for _, g := range set {
		ids = append(ids, g.bus)
		stuck = slices.DeleteFunc(stuck, func(s string) bool { return s == g.bus })
	}
	if err := writeLines(root, requiresRst, stuck); err != nil {
		return err
	}
	log := filepath.Join(root, resetLog)
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s reset %s\n", now.UTC().Format(time.RFC3339Nano), strings.Join(ids, ","))
	return errors.Join(err, f.Close())
}

// toolForm is a bus ID as nvidia-smi writes it: an 8-digit domain, upper
// case ("00000000:3B:00.0"); the kernel's form is remediate.NormalizeBusID.
func toolForm(bus string) string {
	b := remediate.NormalizeBusID(bus)
	if strings.IndexByte(b, ':') == 4 {
		b = "0000" + b
	}
	return strings.ToUpper(b)
}

func readLines(root, rel string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// writeLines replaces a state file whole, so that the tool, running while
// a test changes the state, reads the old or the new one.
func writeLines(root, rel string, lines []string) error {
	body := strings.Join(lines, "\n")
	if body != "" {
		body += "\n"
	}
	return writeAtomic(filepath.Join(root, rel), []byte(body), 0o644)
}

// writeAtomic writes p through a temporary file of its own and a rename.
func writeAtomic(p string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".state-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Chmod(mode), tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p)
}
