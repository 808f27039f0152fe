package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics"
)

// gpuTool is a GPU diagnostic that reports one failed test.
type gpuTool struct{ levels []int }

func (g *gpuTool) Run(_ context.Context, level int, _ time.Duration) (diagnostics.GPUDiagnosticResult, error) {
	g.levels = append(g.levels, level)
	return diagnostics.GPUDiagnosticResult{Summary: "Fail: 1 of 2", Failed: []string{"memory on GPU 0"},
		Output: []byte(`{"DCGM Diagnostic": {}}` + "\n")}, nil
}

// TestLogsWithGPUDiagnostic: --gpu-diagnostic runs the diagnostic first, the
// saved line says how it went and the bundle carries dcgmi's output.
func TestLogsWithGPUDiagnostic(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	tool := &gpuTool{}
	startAgent(t, node, h, func(o *diagnostics.Options) { o.GPUDiagnostics = tool })
	dir := t.TempDir()
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", node, "-o", dir, "--categories", "accelerators", "--gpu-diagnostic", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "GPU diagnostic level 2 FAILED: memory on GPU 0") {
		t.Errorf("the saved line does not give the diagnostic's result:\n%s", out)
	}
	if len(tool.levels) != 1 || tool.levels[0] != 2 {
		t.Errorf("levels run %v", tool.levels)
	}
	files, _ := filepath.Glob(filepath.Join(dir, node, "nodediagnostic-*.tar.gz"))
	if len(files) != 1 {
		t.Fatalf("saved files %v", files)
	}
	if got := untar(t, files[0])["accelerators/nvidia/dcgm-diagnostic.json"]; !strings.Contains(got, "DCGM Diagnostic") {
		t.Errorf("bundle's diagnostic %q", got)
	}
	if _, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", node, "--gpu-diagnostic", "7"); err == nil || !strings.Contains(err.Error(), "levels are 1 to 4") {
		t.Errorf("level 7: %v", err)
	}
}
