package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// fetchNodeFile downloads what the agent left for us on node — a bundle
// or a packet capture under /var/log/nodemend/, served by the kubelet's
// /logs/ — through the API server's node proxy, to path inside dir. The
// file name comes from the API and becomes a proxied path: it must be a
// plain file name (v1alpha1.ValidFileName, as the CRD requires; checked
// again here, for an older CRD or a hostile status writer). The download
// must have the size the agent wrote, and is saved with saveUnder: never
// through a symbolic link below dir, renamed into place (replacing an older
// file) when complete. otherwise says what to do instead when nodes/proxy
// is forbidden.
func fetchNodeFile(ctx context.Context, c *Clients, node, fileName string, size int64, dir, path string, report func(done int64), otherwise string) error {
	if !v1alpha1.ValidFileName(fileName) || filepath.Base(fileName) != fileName {
		return fmt.Errorf("the agent's status names the file %q, which is not a plain file name; not downloading it", termsafe.String(fileName))
	}
	// /api/v1/nodes/NODE/proxy/logs/nodemend/FILE, from validated parts
	// that client-go checks again as path segments.
	rc, err := c.Core.CoreV1().RESTClient().Get().Resource("nodes").Name(node).
		SubResource("proxy", "logs", "nodemend", fileName).Stream(ctx)
	if err != nil {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("RBAC: you may not get nodes/proxy, which downloading the file needs (or %s): %v", otherwise, apierrors.ReasonForError(err))
		}
		return fmt.Errorf("downloading %s through the node proxy (is the kubelet on %s reachable from the API server?): %w", fileName, node, err)
	}
	defer rc.Close()
	return saveUnder(dir, path, func(w io.Writer) error {
		n, err := io.Copy(w, &progressReader{r: rc, total: size, report: report})
		if err == nil && n != size {
			err = fmt.Errorf("got %d bytes, the agent wrote %d", n, size)
		}
		if err != nil {
			return fmt.Errorf("downloading %s: %w", fileName, err)
		}
		return nil
	})
}

// progressReader reports every 10% of total.
type progressReader struct {
	r      io.Reader
	total  int64
	done   int64
	next   int64
	report func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if p.total > 0 && p.done >= p.next {
		p.report(p.done)
		p.next = p.done + p.total/10
	}
	return n, err
}
