package remediate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/internal/command"
)

// The amd-* fixtures are amd-smi's --json outputs (ROCm's amdsmi CLI) on a
// four-GPU MI300X-style board: `list` (gpu, bdf, uuid, kfd_id, node_id,
// partition_id), `process` (a process_list per GPU, "No running processes
// detected" for none), and `reset --gpureset` per GPU: "Successfully reset
// GPU"; "Failed to reset GPU" (the CLI's answer to a library error); the
// library's status stored as the result by earlier releases
// ("AMDSMI_STATUS_BUSY - Device busy", "AMDSMI_STATUS_NOT_SUPPORTED -
// Feature not supported"); and the {"error", "code"} object the CLI prints,
// with exit status 0, for a reset it refuses outright (a virtual machine
// guest, where only --clean-local-data applies).

const (
	amdList    = "amd-smi list --json"
	amdProcs   = "amd-smi process --json"
	amdReset   = "amd-smi reset --gpureset -g "
	amdGPU1    = "0000:26:00.0"
	amdGPU3    = "0000:65:00.0"
	amdResetG1 = amdReset + "1 --json"
)

func amdScript(t *testing.T) *command.Script {
	return command.NewScript().
		Set(amdList, command.Result{Stdout: fixture(t, "amd-list-mi300x.json")}).
		Set(amdProcs, command.Result{Stdout: fixture(t, "amd-process-idle.json")})
}

func amdResets(s *command.Script) []string { return callsAfter(s, amdReset) }

// The monitors name a GPU by its bus ID; amd-smi's -g takes its index.
func TestAMDResetOneGPUByItsIndex(t *testing.T) {
	s := amdScript(t).Set(amdResetG1, command.Result{Stdout: fixture(t, "amd-reset-success.json")})
	res, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{"0000:26:00"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Devices, []string{amdGPU1}) || !slices.Equal(amdResets(s), []string{"1 --json"}) {
		t.Errorf("reset %v (calls %v)", res.Devices, s.Calls())
	}
	// Listed again after the reset: the health check.
	if n := slices.Index(s.Calls(), amdResetG1); n < 0 || !slices.Contains(s.Calls()[n+1:], amdList) {
		t.Errorf("no health check after the reset: %v", s.Calls())
	}
}

func TestAMDResetEveryGPUWhenNoneIsNamed(t *testing.T) {
	s := amdScript(t).Set(amdReset+"0 1 2 3 --json", command.Result{Stdout: `[{"gpu": 0, "gpu_reset": "Successfully reset GPU"},
{"gpu": 1, "gpu_reset": "Successfully reset GPU"}, {"gpu": 2, "gpu_reset": "Successfully reset GPU"},
{"gpu": 3, "gpu_reset": "Successfully reset GPU"}]`})
	res, err := AMDSMI{Commands: s}.Reset(t.Context(), nil)
	if err != nil || len(res.Devices) != 4 {
		t.Fatalf("devices %v, err %v (calls %v)", res.Devices, err, s.Calls())
	}
}

// The driver recovers a GPU in use and takes its XGMI hive with it: a
// process on any GPU of the host — here GPU 3, not the one to reset —
// refuses the reset before amd-smi is asked.
func TestAMDResetRefusedWhileAProcessHoldsAGPUOfTheHost(t *testing.T) {
	s := amdScript(t).Set(amdProcs, command.Result{Stdout: fixture(t, "amd-process-busy.json")}).
		Set(amdReset+"*", command.Result{Stdout: fixture(t, "amd-reset-success.json")})
	_, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{amdGPU1})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "48211 python3 on "+amdGPU3) {
		t.Fatalf("err = %v, want ErrBusy naming pid 48211 on %s", err, amdGPU3)
	}
	if len(amdResets(s)) != 0 {
		t.Errorf("reset ran: %v", s.Calls())
	}
}

// amd-smi exits 0 whatever its result: the output decides.
func TestAMDResetResultsOfTheTool(t *testing.T) {
	for _, c := range []struct {
		fixture string
		want    error
		says    string
	}{
		{"amd-reset-busy.json", ErrBusy, "AMDSMI_STATUS_BUSY"},
		{"amd-reset-failed.json", ErrRefused, "Failed to reset GPU"},
		{"amd-reset-not-supported.json", ErrRefused, "AMDSMI_STATUS_NOT_SUPPORTED"},
		{"amd-reset-guest-refused.json", ErrRefused, "code -9"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			s := amdScript(t).Set(amdResetG1, command.Result{Stdout: fixture(t, c.fixture)})
			_, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{amdGPU1})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err = %v, want %v saying %q", err, c.want, c.says)
			}
			if c.want == ErrRefused && errors.Is(err, ErrBusy) {
				t.Errorf("a refusal read as busy: %v", err)
			}
		})
	}
}

// A non-zero exit with nothing readable (amd-smi without permission ends
// in a Python traceback) is a refusal, not a success.
func TestAMDResetExitWithoutAResult(t *testing.T) {
	s := amdScript(t).Set(amdResetG1, command.Result{Stdout: "PermissionError: Command requires elevation\n", Err: failed})
	_, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{amdGPU1})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "requires elevation") {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
}

// One GPU of the set reset, another not: the set is not healthy (and the
// rung is not "refused": something was done).
func TestAMDResetPartly(t *testing.T) {
	s := amdScript(t).Set(amdReset+"1 3 --json", command.Result{Stdout: fixture(t, "amd-reset-two-one-failed.json")})
	_, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{amdGPU1, amdGPU3})
	if !errors.Is(err, ErrUnhealthy) || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), amdGPU3+": Failed to reset GPU") {
		t.Fatalf("err = %v, want ErrUnhealthy naming %s", err, amdGPU3)
	}
}

// After the reset the GPU answers amd-smi without its UUID: not healthy.
func TestAMDResetButTheGPUDoesNotAnswer(t *testing.T) {
	s := amdScript(t).Set(amdResetG1, command.Result{Stdout: fixture(t, "amd-reset-success.json")})
	calls := 0
	r := countingRunner{Runner: s, on: amdList, after: 1, then: fixture(t, "amd-list-uuid-lost.json"), n: &calls}
	_, err := AMDSMI{Commands: r}.Reset(t.Context(), []string{amdGPU1})
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), amdGPU1) {
		t.Fatalf("err = %v, want ErrUnhealthy for %s", err, amdGPU1)
	}
}

func TestAMDResetUnknownGPU(t *testing.T) {
	s := amdScript(t)
	_, err := AMDSMI{Commands: s}.Reset(t.Context(), []string{"0000:99:00.0"})
	if !errors.Is(err, ErrRefused) || len(amdResets(s)) != 0 {
		t.Fatalf("err = %v, calls %v", err, s.Calls())
	}
}

func TestSelectResetter(t *testing.T) {
	for _, c := range []struct {
		tools []string
		want  string
	}{
		{[]string{"nvidia-smi"}, "nvidia-smi"},
		{[]string{"amd-smi"}, "amd-smi"},
		{nil, ""},
	} {
		s := command.NewScript()
		for _, tool := range c.tools {
			s.Set(tool+" list", command.Result{})
		}
		r, why := SelectResetter(s)
		switch {
		case c.want == "" && (r != nil || !strings.Contains(why, "amd-smi")):
			t.Errorf("tools %v: resetter %v, why %q", c.tools, r, why)
		case c.want != "" && (r == nil || r.Mechanism() != c.want):
			t.Errorf("tools %v: resetter %v, want %s", c.tools, r, c.want)
		}
	}
}

// The driver's tool is found on the host when the agent's image lacks it,
// and the resetter runs it there.
func TestSelectResetterFindsTheHostsTool(t *testing.T) {
	own, host := command.NewScript(), command.NewScript()
	host.Set("nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader", command.Result{Stdout: "00000000:3B:00.0\n"})
	r, why := SelectResetter(own, nil, host)
	if r == nil {
		t.Fatalf("no resetter: %s", why)
	}
	n, ok := r.(NvidiaSMI)
	if !ok || n.Commands != command.Runner(host) {
		t.Fatalf("resetter %#v, want nvidia-smi run on the host", r)
	}
	if r, _ := SelectResetter(nil, own); r != nil {
		t.Errorf("resetter %v with no tool anywhere", r)
	}
}

// A tool that is there but refused (writable by others) is named as such,
// not reported missing.
func TestSelectResetterNamesARefusedTool(t *testing.T) {
	r, why := SelectResetter(command.NewScript(), untrusted{})
	if r != nil || !strings.Contains(why, "nvidia-smi") || !strings.Contains(why, childproc.ErrUntrusted.Error()) {
		t.Fatalf("resetter %v, why %q", r, why)
	}
}

// untrusted is a host whose nvidia-smi others could have written.
type untrusted struct{}

func (untrusted) Run(context.Context, string, []string, io.Writer) error {
	return errors.New("not run")
}

func (untrusted) LookPath(name string) (string, error) {
	if name == "nvidia-smi" {
		return "", fmt.Errorf("/usr/bin/nvidia-smi: %w", childproc.ErrUntrusted)
	}
	return "", childproc.ErrNotFound
}
