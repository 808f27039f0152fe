package simgpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/agent/remediate"
)

// tool runs the stand-in in-process, as a command.Runner: the agent's own
// resetter drives it, so the simulation answers what the agent parses.
type tool struct {
	root  string
	calls []string
}

func (t *tool) LookPath(name string) (string, error) {
	if name != "nvidia-smi" {
		return "", fmt.Errorf("%s: not installed", name)
	}
	return "/" + ToolPath, nil
}

func (t *tool) Run(_ context.Context, name string, args []string, stdout io.Writer) error {
	t.calls = append(t.calls, strings.Join(append([]string{name}, args...), " "))
	var stderr bytes.Buffer
	if code := runAt(t.root, args, stdout, &stderr, time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)); code != 0 {
		return fmt.Errorf("exit status %d: %s", code, stderr.String())
	}
	return nil
}

func host(t *testing.T, gpus int) *tool {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "fake-nvidia-smi")
	if err := os.WriteFile(bin, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install(root, gpus, bin); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, ToolPath)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("tool not installed 0755: %v %v", fi, err)
	}
	return &tool{root: root}
}

func TestResetOfAFaultedGPUMakesItHealthy(t *testing.T) {
	h := host(t, 4)
	bus := BusID(0)
	if bus != "0000:3b:00.0" {
		t.Fatalf("GPU 0 is %s, want the e2e tests' 0000:3b:00.0", bus)
	}
	if err := RequireReset(h.root, "0000:3b:00"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := h.Run(context.Background(), "nvidia-smi", []string{"--query-gpu=pci.bus_id,uuid,pstate", "--format=csv", "-i", "0"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "pci.bus_id, uuid, pstate\n00000000:3B:00.0, [GPU requires reset], [GPU requires reset]\n"
	if out.String() != want {
		t.Errorf("before the reset:\n%s\nwant\n%s", out.String(), want)
	}

	res, err := remediate.NvidiaSMI{Commands: h}.Reset(context.Background(), []string{"0000:3b:00"})
	if err != nil {
		t.Fatalf("reset: %v (calls %q)", err, h.calls)
	}
	if !slices.Equal(res.Devices, []string{bus}) {
		t.Errorf("reset %v, want [%s]", res.Devices, bus)
	}
	got, err := Resets(h.root)
	if err != nil || len(got) != 1 || !slices.Equal(got[0], []string{bus}) {
		t.Errorf("resets recorded %v (%v), want [[%s]]", got, err, bus)
	}
}

func TestResetOfABusyGPUIsRefusedAndChangesNothing(t *testing.T) {
	h := host(t, 2)
	if err := RequireReset(h.root, BusID(1)); err != nil {
		t.Fatal(err)
	}
	if err := SetBusy(h.root, BusID(1), 48211, "python3"); err != nil {
		t.Fatal(err)
	}
	_, err := remediate.NvidiaSMI{Commands: h}.Reset(context.Background(), []string{BusID(1)})
	if !errors.Is(err, remediate.ErrBusy) || !strings.Contains(err.Error(), "48211 python3") {
		t.Fatalf("reset of a busy GPU: %v, want ErrBusy naming the process", err)
	}
	// The tool itself refuses too, in the driver's words, when asked
	// without the process check.
	var out bytes.Buffer
	err = h.Run(context.Background(), "nvidia-smi", []string{"--gpu-reset", "-i", BusID(1)}, &out)
	if err == nil || !strings.Contains(out.String(), "GPU 00000000:5E:00.0: In use by another client") {
		t.Errorf("--gpu-reset of a busy GPU: %v\n%s", err, out.String())
	}
	if got, _ := Resets(h.root); len(got) != 0 {
		t.Errorf("resets recorded %v, want none", got)
	}

	// A reboot ends the process and the fault: the GPU answers healthy.
	if err := Reboot(h.root); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := h.Run(context.Background(), "nvidia-smi", []string{"--query-gpu=pci.bus_id,pstate", "--format=csv,noheader", "-i", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "00000000:5E:00.0, P0\n" {
		t.Errorf("after a reboot: %q", out.String())
	}
}

func TestToolRefusesWhatTheDriverRefuses(t *testing.T) {
	h := host(t, 1)
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"--query-gpu=pci.bus_id", "--format=csv", "-i", "0000:99:00.0"}, "No devices were found"},
		{[]string{"--query-gpu=power.draw", "--format=csv"}, `Field "power.draw" is not a valid field to query.`},
		{[]string{"--query-gpu=pci.bus_id", "--format=json"}, ""},
		{[]string{"topo", "-m"}, ""},
		{[]string{"--no-such-flag"}, ""},
	} {
		var out bytes.Buffer
		err := h.Run(context.Background(), "nvidia-smi", c.args, &out)
		if err == nil || !strings.Contains(out.String(), c.out) {
			t.Errorf("%q: %v, output %q; want a failure saying %q", c.args, err, out.String(), c.out)
		}
	}
	if err := Install(h.root, 9, "/nonexistent"); err == nil {
		t.Error("a host of 9 GPUs was installed")
	}
}

func TestBusIDForms(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3b:00":       "00000000:3B:00.0",
		"0000:3b:00.0":     "00000000:3B:00.0",
		"00000000:3B:00.0": "00000000:3B:00.0",
	} {
		if got := toolForm(in); got != want {
			t.Errorf("toolForm(%q) = %q, want %q", in, got, want)
		}
		if got := remediate.NormalizeBusID(in); got != "0000:3b:00.0" {
			t.Errorf("NormalizeBusID(%q) = %q", in, got)
		}
	}
}
