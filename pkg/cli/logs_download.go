package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// bundlePath is where node's bundle named fileName is saved under dir. Both
// names come from the API and become a path, and a proxied request path:
// the node name must be a node name (a DNS subdomain) and the file name a
// plain file name (v1alpha1.ValidFileName, as the CRD requires; checked
// again here, for an older CRD or a hostile status writer), and the result
// must lie inside dir.
func bundlePath(dir, node, fileName string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return "", fmt.Errorf("node name %q is not a node name: %s", termsafe.String(node), strings.Join(errs, "; "))
	}
	if !v1alpha1.ValidFileName(fileName) || filepath.Base(fileName) != fileName {
		return "", fmt.Errorf("the agent's status names the bundle %q, which is not a plain file name; not downloading it", termsafe.String(fileName))
	}
	p := filepath.Join(dir, node, fileName)
	if rel, err := filepath.Rel(dir, p); err != nil || rel != filepath.Join(node, fileName) {
		return "", fmt.Errorf("bundle path %q would leave the output directory", termsafe.String(p))
	}
	return p, nil
}

// download fetches the bundle through the API server's node proxy (the
// kubelet serves /var/log at /logs/).
func (o *logsOptions) download(ctx context.Context, c *Clients, prog *Progress, node string, st *v1alpha1.CaptureStatus) (string, error) {
	// kubectl ekslogs' name for the flat layout.
	return o.fetch(ctx, c, prog, node, st.FileName, st.SizeBytes, node+"-logs.tar.gz", true)
}

// downloadGPUResult fetches dcgmi's JSON output, which the agent keeps on
// the node beside the bundle, and saves it beside the bundle here too.
func (o *logsOptions) downloadGPUResult(ctx context.Context, c *Clients, prog *Progress, node string, g *v1alpha1.GPUDiagnosticStatus) (string, error) {
	// The flat name goes beside NODE-logs.tar.gz. A small file: no ticks.
	return o.fetch(ctx, c, prog, node, g.FileName, g.SizeBytes, node+"-gpu-diagnostic.json", false)
}

// fetch saves the node's file fileName (size bytes, as the agent's status
// says) under the output directory: NODE/fileName, or flatName with --flat.
func (o *logsOptions) fetch(ctx context.Context, c *Clients, prog *Progress, node, fileName string, size int64, flatName string, ticks bool) (string, error) {
	path, err := bundlePath(o.outputDir, node, fileName)
	if err != nil {
		return "", err
	}
	if o.flat {
		// bundlePath checked the node name (a DNS subdomain: no
		// separators, no "..").
		path = filepath.Join(o.outputDir, flatName)
	}
	prog.Update(node, "downloading", "%s (%s)", fileName, bytecount.Human(size))
	tick := func(int64) {}
	if ticks {
		tick = func(done int64) {
			prog.Tick(node, "downloading", "%s / %s", bytecount.Human(done), bytecount.Human(size))
		}
	}
	return path, fetchNodeFile(ctx, c, node, fileName, size, o.outputDir, path, tick, "use --upload-url")
}

// gpuNote says how the GPU diagnostic went, for the "saved" line.
func gpuNote(g *v1alpha1.GPUDiagnosticStatus) string {
	switch {
	case g.State == v1alpha1.CaptureFailed:
		return "GPU diagnostic not done: " + truncate(g.Message, 200)
	case g.Result == v1alpha1.GPUDiagnosticFail:
		return fmt.Sprintf("GPU diagnostic level %d FAILED: %s", g.Level, strings.Join(g.FailedTests, ", "))
	}
	return fmt.Sprintf("GPU diagnostic level %d passed", g.Level)
}
