//go:build e2e

package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/mendclient"
)

// TestBundleHasTheInstanceMetadata: the simulation's agents read AWS's EC2
// metadata mock as their cloud's metadata service (never the real
// link-local address), so a bundle from a simulated node holds the
// instance's metadata.
func TestBundleHasTheInstanceMetadata(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-bundle", replicas: 1, maxUnavail: 1, condition: kernelCondition, toleration: "30m", deadline: "1m", gate: "50%"}
	node := sc.setUp(ctx, t)[0]
	host, err := cluster.Host(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := mendclient.New(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := nd.Create(ctx, &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-bundle-"},
		Spec: v1alpha1.NodeDiagnosticSpec{NodeName: node, LogCapture: &v1alpha1.LogCaptureSpec{Destination: v1alpha1.DestinationNode,
			Categories: []v1alpha1.LogCategory{v1alpha1.CategoryBase}}}})
	if err != nil {
		t.Fatal(err)
	}
	var file string
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		o, err := nd.Get(ctx, obj.Name)
		if err != nil {
			return false, err
		}
		if st := o.Status.LogCapture; st != nil && st.State.Final() {
			file = st.FileName
			return true, nil
		}
		return false, nil
	})
	if err != nil || file == "" {
		t.Fatalf("no bundle: %v", err)
	}
	f, err := os.Open(filepath.Join(host.Root, "var/log/nodemend", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	found := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		found[h.Name[strings.Index(h.Name, "/")+1:]] = string(data)
	}
	if id := found["base/cloud/aws/meta-data/instance-id"]; !strings.HasPrefix(id, "i-") {
		t.Errorf("instance-id %q; bundle entries: %d", id, len(found))
	}
}
