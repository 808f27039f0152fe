package remediate

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/command"
)

// The fixtures in testdata are nvidia-smi's outputs for the cases its manual
// describes for --gpu-reset (success, a GPU in use, a set of NVLink peers
// that must be reset together, a GPU that cannot be reset) and its CSV
// queries (--query-gpu, --query-compute-apps) on an 8-way-style NVSwitch
// board shortened to four GPUs. Exit status 0 on success, non-zero on any
// refusal, as the tool documents.

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var failed = errors.New("exit status 255")

const (
	listGPUs    = "nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader"
	apps        = "nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name --format=csv,noheader"
	healthQuery = "nvidia-smi --query-gpu=pci.bus_id,uuid,pstate,ecc.errors.uncorrected.volatile.total --format=csv,noheader -i "
	reset       = "nvidia-smi --gpu-reset -i "
	one         = "0000:2a:00.0"
	all4        = "0000:2a:00.0,0000:18:00.0,0000:3a:00.0,0000:5d:00.0"
)

func script(t *testing.T) *command.Script {
	return command.NewScript().
		Set(listGPUs, command.Result{Stdout: fixture(t, "query-gpus-hgx.txt")}).
		Set(apps, command.Result{})
}

// resets are the nvidia-smi resets s ran, by their arguments after -i.
func resets(s *command.Script) []string { return callsAfter(s, reset) }

// callsAfter are the command lines s ran that start with prefix, without it.
func callsAfter(s *command.Script, prefix string) []string {
	var r []string
	for _, c := range s.Calls() {
		if strings.HasPrefix(c, prefix) {
			r = append(r, strings.TrimPrefix(c, prefix))
		}
	}
	return r
}

func TestResetOneGPU(t *testing.T) {
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-success.txt")}).
		Set(healthQuery+one, command.Result{Stdout: fixture(t, "health-ok.txt")})
	res, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{"00000000:2A:00.0"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Devices, []string{one}) || !slices.Equal(resets(s), []string{one}) {
		t.Errorf("reset %v (calls %v)", res.Devices, s.Calls())
	}
}

// A GPU a process holds is never reset: the rung fails and the ladder
// escalates.
func TestResetRefusedWhileAProcessHoldsTheGPU(t *testing.T) {
	s := script(t).Set(apps, command.Result{Stdout: fixture(t, "compute-apps-busy.txt")}).
		Set(reset+"*", command.Result{Stdout: fixture(t, "reset-success.txt")})
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "48211 python3") {
		t.Fatalf("err = %v, want ErrBusy naming pid 48211", err)
	}
	if len(resets(s)) != 0 {
		t.Errorf("reset ran: %v", s.Calls())
	}
}

// A client nvidia-smi sees but the process list does not (a monitoring
// tool, Fabric Manager): nvidia-smi's own refusal is ErrBusy too.
func TestResetRefusedByTheDriverWhenInUse(t *testing.T) {
	s := script(t).Set(reset+one, command.Result{Stdout: fixture(t, "reset-in-use.txt"), Err: failed})
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

// On an NVSwitch/NVLink system that cannot reset one GPU alone, nvidia-smi
// names the peers; the set is reset together once, if none of them is busy.
func TestResetIncludesTheNVLinkPeersTheDriverRequires(t *testing.T) {
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-nvlink-peers.txt"), Err: failed}).
		Set(reset+all4, command.Result{Stdout: fixture(t, "reset-success.txt")}).
		Set(healthQuery+all4, command.Result{Stdout: fixture(t, "health-all-ok.txt")})
	res, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resets(s), []string{one, all4}) || len(res.Devices) != 4 {
		t.Errorf("resets %v, devices %v", resets(s), res.Devices)
	}
}

// The peers the driver requires are busy: nothing is reset.
func TestResetRefusedWhenARequiredPeerIsBusy(t *testing.T) {
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-nvlink-peers.txt"), Err: failed}).
		Set(reset+all4, command.Result{Stdout: fixture(t, "reset-success.txt")})
	calls := 0
	// The process list is empty for the first check and shows the peer's
	// job for the second (a job started meanwhile on another GPU).
	s.Set(apps, command.Result{})
	r := countingRunner{Runner: s, on: apps, after: 1, then: fixture(t, "compute-apps-busy.txt"), n: &calls}
	_, err := NvidiaSMI{Commands: r}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	if got := resets(s); !slices.Equal(got, []string{one}) {
		t.Errorf("resets %v, want only the refused one", got)
	}
}

func TestResetNotSupported(t *testing.T) {
	s := script(t).Set(reset+one, command.Result{Stdout: fixture(t, "reset-not-supported.txt"), Err: failed})
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is not supported") {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
}

// A GPU that still reports "[GPU requires reset]" after the reset is not
// healthy: the fault is not cleared, the ladder escalates.
func TestResetButStillUnhealthy(t *testing.T) {
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-success.txt")}).
		Set(healthQuery+one, command.Result{Stdout: fixture(t, "health-requires-reset.txt")})
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("err = %v, want ErrUnhealthy", err)
	}
}

func TestResetUnknownGPU(t *testing.T) {
	s := script(t)
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{"0000:99:00.0"})
	if !errors.Is(err, ErrRefused) || len(resets(s)) != 0 {
		t.Fatalf("err = %v, calls %v", err, s.Calls())
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0", "0000:3b:00.0": "0000:3b:00.0", " 00000001:AF:00.1 ": "0001:af:00.1", "0000:2b:00": "0000:2b:00.0",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// countingRunner answers command line on from the script for its first
// after calls, then with then.
type countingRunner struct {
	command.Runner
	on    string
	after int
	then  string
	n     *int
}

func (c countingRunner) Run(ctx context.Context, name string, args []string, w io.Writer) error {
	if strings.Join(append([]string{name}, args...), " ") == c.on {
		*c.n++
		if *c.n > c.after {
			_, err := io.WriteString(w, c.then)
			return err
		}
	}
	return c.Runner.Run(ctx, name, args, w)
}
