package remediate

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/command"
)

// The driver's required peers are added once: a second refusal that names
// yet more GPUs (the set grew again after the expansion) is a refusal, and
// nothing more is reset.
func TestResetRefusedWhenTheDriverNamesMorePeersAfterTheExpansion(t *testing.T) {
	const five = all4 + ",0000:9b:00.0"
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-nvlink-peers.txt"), Err: failed}).
		Set(reset+all4, command.Result{Stdout: "Unable to reset GPU 00000000:2A:00.0 because it's linked to other GPUs via NVLink and those GPUs are not being reset along with it.\n" +
			"GPUs that must also be reset: 00000000:9B:00.0\n", Err: failed}).
		Set(reset+five, command.Result{Stdout: fixture(t, "reset-success.txt")}).
		Set(healthQuery+five, command.Result{Stdout: fixture(t, "health-all-ok.txt")})
	_, err := NvidiaSMI{Commands: s}.Reset(t.Context(), []string{one})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	if got := resets(s); !slices.Equal(got, []string{one, all4}) {
		t.Errorf("resets %v, want the GPU and then its peers once", got)
	}
}

// A reset tool that exits with an error has not reset, whatever its output
// claims: nvidia-smi's exit status is its answer (its manual: 0 on success),
// and so is that of its health query after the reset.
func TestNvidiaResetExitingWithAnErrorIsNotASuccess(t *testing.T) {
	s := script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-success.txt"), Err: failed}).
		Set(healthQuery+one, command.Result{Stdout: fixture(t, "health-ok.txt")})
	if _, err := (NvidiaSMI{Commands: s}).Reset(t.Context(), []string{one}); !errors.Is(err, ErrRefused) {
		t.Errorf("reset exits 255 saying it succeeded: err = %v, want ErrRefused", err)
	}
	s = script(t).
		Set(reset+one, command.Result{Stdout: fixture(t, "reset-success.txt")}).
		Set(healthQuery+one, command.Result{Stdout: fixture(t, "health-ok.txt"), Err: failed})
	if _, err := (NvidiaSMI{Commands: s}).Reset(t.Context(), []string{one}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("health query exits 255 with healthy output: err = %v, want ErrUnhealthy", err)
	}
}

// amd-smi: every GPU answered "Successfully reset GPU" but the tool exited
// with an error — not a success; nor is a health listing that exits with an
// error.
func TestAMDResetExitingWithAnErrorIsNotASuccess(t *testing.T) {
	s := amdScript(t).Set(amdResetG1, command.Result{Stdout: fixture(t, "amd-reset-success.json"), Err: failed})
	if _, err := (AMDSMI{Commands: s}).Reset(t.Context(), []string{amdGPU1}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("reset exits 255 saying it succeeded: err = %v, want ErrUnhealthy", err)
	}
	s = amdScript(t).Set(amdResetG1, command.Result{Stdout: fixture(t, "amd-reset-success.json")})
	r := exitAfter{Runner: s, on: amdList, after: 1, n: new(int)}
	if _, err := (AMDSMI{Commands: r}).Reset(t.Context(), []string{amdGPU1}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("health listing exits 255 with the GPU in it: err = %v, want ErrUnhealthy", err)
	}
}

// exitAfter answers command line on from the script, and from its
// (after+1)th call on also exits with an error.
type exitAfter struct {
	command.Runner
	on    string
	after int
	n     *int
}

func (e exitAfter) Run(ctx context.Context, name string, args []string, w io.Writer) error {
	err := e.Runner.Run(ctx, name, args, w)
	if strings.Join(append([]string{name}, args...), " ") != e.on {
		return err
	}
	*e.n++
	if *e.n > e.after && err == nil {
		return failed
	}
	return err
}
