package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics"
)

// gpuOutput is what the stand-in dcgmi prints: dcgmi diag --json's top
// level, with one failed test.
const gpuOutput = `{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Fail"}]}]}]}}` + "\n"

// gpuTool is a GPU diagnostic that reports one failed test.
type gpuTool struct{ levels []int }

func (g *gpuTool) Run(_ context.Context, level int, _ time.Duration) (diagnostics.GPUDiagnosticResult, error) {
	g.levels = append(g.levels, level)
	return diagnostics.GPUDiagnosticResult{Summary: "Fail: 1 of 2", Failed: []string{"memory on GPU 0"},
		Output: []byte(gpuOutput)}, nil
}

// TestLogsWithGPUDiagnostic: a bare --gpu-diagnostic runs DCGM's quick
// diagnostic (level 1) first, --gpu-diagnostic=2 the medium one; the saved
// line says how it went, dcgmi's JSON is downloaded beside the bundle
// (NODE-gpu-diagnostic.json with --flat) and the bundle carries it too. A
// level after a space, or out of range, is refused before anything is
// created.
func TestLogsWithGPUDiagnostic(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	tool := &gpuTool{}
	startAgent(t, node, h, func(o *diagnostics.Options) { o.GPUDiagnostics = tool })
	kc := kubeconfig(t, cfg)

	dir := t.TempDir()
	out, err := run(t, "--kubeconfig", kc, "logs", node, "-o", dir, "--categories", "accelerators", "--gpu-diagnostic")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "GPU diagnostic level 1 FAILED: memory on GPU 0") {
		t.Errorf("the saved line does not give the diagnostic's result:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, node, "nodediagnostic-*.tar.gz"))
	if len(files) != 1 {
		t.Fatalf("saved bundles %v", files)
	}
	if got := untar(t, files[0])["accelerators/nvidia/dcgm-diagnostic.json"]; got != gpuOutput {
		t.Errorf("bundle's diagnostic %q", got)
	}
	results, _ := filepath.Glob(filepath.Join(dir, node, "nodediagnostic-*-gpu-diagnostic.json"))
	if len(results) != 1 {
		t.Fatalf("saved results %v", results)
	}
	if b, err := os.ReadFile(results[0]); err != nil || string(b) != gpuOutput {
		t.Errorf("saved result %q (%v)", b, err)
	}
	if !strings.Contains(out, "; result "+results[0]) {
		t.Errorf("the saved line does not name the result file:\n%s", out)
	}

	flat := t.TempDir()
	if _, err := run(t, "--kubeconfig", kc, "logs", "--flat", node, "-o", flat, "--categories", "accelerators", "--gpu-diagnostic=2"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(flat, node+"-gpu-diagnostic.json")); err != nil || string(b) != gpuOutput {
		t.Errorf("flat result %q (%v)", b, err)
	}
	untar(t, filepath.Join(flat, node+"-logs.tar.gz"))
	if len(tool.levels) != 2 || tool.levels[0] != 1 || tool.levels[1] != 2 {
		t.Errorf("levels run %v, want [1 2]", tool.levels)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", node, "--gpu-diagnostic", "2"}, `"2" is not a node: write the level as --gpu-diagnostic=2`},
		{[]string{"logs", node, "--gpu-diagnostic=7"}, "levels are 1 to 4"},
		{[]string{"logs", node, "--gpu-diagnostic=x"}, "invalid argument"},
	} {
		if _, err := run(t, append([]string{"--kubeconfig", kc}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if len(tool.levels) != 2 {
		t.Errorf("a refused request ran a diagnostic: levels %v", tool.levels)
	}
}
