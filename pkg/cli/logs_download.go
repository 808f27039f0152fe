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
	path, err := bundlePath(o.outputDir, node, st.FileName)
	if err != nil {
		return "", err
	}
	if o.flat {
		// kubectl ekslogs' name; bundlePath checked the node name (a DNS
		// subdomain: no separators, no "..").
		path = filepath.Join(o.outputDir, node+"-logs.tar.gz")
	}
	prog.Update(node, "downloading", "%s (%s)", st.FileName, bytecount.Human(st.SizeBytes))
	err = fetchNodeFile(ctx, c, node, st.FileName, st.SizeBytes, o.outputDir, path, func(done int64) {
		prog.Tick(node, "downloading", "%s / %s", bytecount.Human(done), bytecount.Human(st.SizeBytes))
	}, "use --upload-url")
	return path, err
}

// downloadGPUResult fetches dcgmi's JSON output, which the agent keeps on
// the node beside the bundle, and saves it beside the bundle here too.
func (o *logsOptions) downloadGPUResult(ctx context.Context, c *Clients, prog *Progress, node string, g *v1alpha1.GPUDiagnosticStatus) (string, error) {
	path, err := bundlePath(o.outputDir, node, g.FileName)
	if err != nil {
		return "", err
	}
	if o.flat {
		// kubectl ekslogs-like flat name beside NODE-logs.tar.gz.
		path = filepath.Join(o.outputDir, node+"-gpu-diagnostic.json")
	}
	prog.Update(node, "downloading", "%s (%s)", g.FileName, bytecount.Human(g.SizeBytes))
	return path, fetchNodeFile(ctx, c, node, g.FileName, g.SizeBytes, o.outputDir, path, func(int64) {}, "use --upload-url")
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
