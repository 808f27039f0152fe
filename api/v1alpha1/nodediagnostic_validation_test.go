package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{testenv.NodemendCRDs()}}, func(env *testenv.Env) error {
		scheme := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			return err
		}
		var err error
		k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
		return err
	})
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func packets(mut func(*v1alpha1.PacketCaptureSpec)) v1alpha1.NodeDiagnosticSpec {
	p := &v1alpha1.PacketCaptureSpec{
		Interface:  "eth0",
		Filter:     "tcp port 443 and host 10.0.0.1",
		Duration:   metav1.Duration{Duration: time.Minute},
		UploadURLs: []v1alpha1.UploadURL{"https://bucket.example.com/c0?X-Amz-Signature=abc"},
	}
	if mut != nil {
		mut(p)
	}
	return v1alpha1.NodeDiagnosticSpec{NodeName: "node-a", PacketCapture: p}
}

// post is a POST policy destination with the fields AWS's SDK makes.
func post(url string, mut func(map[string]string)) *v1alpha1.PostUpload {
	f := map[string]string{"key": "cap/${filename}", "policy": "eyJleHBpcmF0aW9uIjoiMjAzMC0wMS0wMVQwMDowMDowMFoiLCJjb25kaXRpb25zIjpbXX0=",
		"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": "AKIA/20300101/eu-west-1/s3/aws4_request",
		"X-Amz-Date": "20300101T000000Z", "X-Amz-Signature": "abc"}
	if mut != nil {
		mut(f)
	}
	return &v1alpha1.PostUpload{URL: url, Fields: f}
}

func gpu(level int32, timeout *metav1.Duration) v1alpha1.NodeDiagnosticSpec {
	return v1alpha1.NodeDiagnosticSpec{NodeName: "node-a", GPUDiagnostic: &v1alpha1.GPUDiagnosticSpec{Level: level, Timeout: timeout}}
}

func logs(dest string, mut func(*v1alpha1.LogCaptureSpec)) v1alpha1.NodeDiagnosticSpec {
	l := &v1alpha1.LogCaptureSpec{Destination: dest}
	if mut != nil {
		mut(l)
	}
	return v1alpha1.NodeDiagnosticSpec{NodeName: "node-a", LogCapture: l}
}

// TestAdmission checks every CEL rule and schema constraint of the CRD on the
// real API server: the rejections carry the CRD's own messages.
func TestAdmission(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	cases := []struct {
		name string
		spec v1alpha1.NodeDiagnosticSpec
		// wantErr is a substring of the rejection; empty means accepted.
		wantErr string
	}{
		{"logs to node", logs("node", nil), ""},
		{"logs default destination", logs("", nil), ""},
		{"logs to pre-signed https URL", logs("https://bucket.s3.amazonaws.com/b.tgz?X-Amz-Signature=x", nil), ""},
		{"logs to private IP (agent decides)", logs("https://10.1.2.3/upload", nil), ""},
		{"logs with categories and since", logs("node", func(l *v1alpha1.LogCaptureSpec) {
			l.Categories = []v1alpha1.LogCategory{"base", "kernel", "networking"}
			l.Since = dur(2 * time.Hour)
		}), ""},
		{"nothing to capture", v1alpha1.NodeDiagnosticSpec{NodeName: "node-a"}, "at least one of logCapture, packetCapture and gpuDiagnostic is required"},
		{"gpu diagnostic alone", gpu(2, nil), ""},
		{"gpu diagnostic with timeout", gpu(3, dur(45*time.Minute)), ""},
		{"gpu diagnostic default level", gpu(0, nil), ""},
		{"gpu diagnostic level 5", gpu(5, nil), "spec.gpuDiagnostic.level"},
		{"gpu diagnostic level -1", gpu(-1, nil), "spec.gpuDiagnostic.level"},
		{"gpu diagnostic over 8h", gpu(4, dur(9*time.Hour)), "timeout must be between 1s and 8h"},
		{"gpu diagnostic of 0s", gpu(1, dur(0)), "timeout must be between 1s and 8h"},
		{"no node", v1alpha1.NodeDiagnosticSpec{LogCapture: &v1alpha1.LogCaptureSpec{}}, "spec.nodeName"},
		{"bad node name", v1alpha1.NodeDiagnosticSpec{NodeName: "Node_A", LogCapture: &v1alpha1.LogCaptureSpec{}}, "spec.nodeName"},
		{"http destination", logs("http://bucket.example.com/x", nil), `destination must be "node" or an https:// URL`},
		{"file destination", logs("file:///etc/shadow", nil), `destination must be "node" or an https:// URL`},
		{"other word", logs("nodes", nil), `destination must be "node" or an https:// URL`},
		{"no host", logs("https:///path", nil), "destination must be a valid URL with a host"},
		{"metadata IP", logs("https://169.254.169.254/latest/meta-data", nil), "must not be a loopback, link-local"},
		{"loopback", logs("https://127.0.0.1:8443/x", nil), "must not be a loopback, link-local"},
		{"loopback v6", logs("https://[::1]/x", nil), "must not be a loopback, link-local"},
		{"link-local v6", logs("https://[fe80::1]/x", nil), "must not be a loopback, link-local"},
		{"unspecified", logs("https://0.0.0.0/x", nil), "must not be a loopback, link-local"},
		{"localhost", logs("https://LocalHost:9000/x", nil), "must not be a loopback, link-local"},
		{"v4-mapped metadata IP", logs("https://[::ffff:169.254.169.254]/x", nil), "must not be a loopback, link-local"},
		{"credentials in URL", logs("https://user:pw@bucket.example.com/x", nil), "destination must not contain user credentials"},
		{"name that starts like localhost", logs("https://localhost.example.com/x", nil), ""},
		{"unknown category", logs("node", func(l *v1alpha1.LogCaptureSpec) { l.Categories = []v1alpha1.LogCategory{"everything"} }), "Unsupported value"},
		{"duplicate category", logs("node", func(l *v1alpha1.LogCaptureSpec) { l.Categories = []v1alpha1.LogCategory{"base", "base"} }), "Duplicate value"},
		{"since zero", logs("node", func(l *v1alpha1.LogCaptureSpec) { l.Since = dur(0) }), "since must be more than 0s and at most 720h"},
		{"since too long", logs("node", func(l *v1alpha1.LogCaptureSpec) { l.Since = dur(1000 * time.Hour) }), "since must be more than 0s and at most 720h"},

		{"packet capture", packets(nil), ""},
		{"packet capture any, 1h, 1Gi chunks", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.Interface, p.Duration, p.ChunkSize = "any", metav1.Duration{Duration: time.Hour}, q("1Gi")
		}), ""},
		{"both captures", v1alpha1.NodeDiagnosticSpec{NodeName: "node-a", LogCapture: logs("node", nil).LogCapture, PacketCapture: packets(nil).PacketCapture}, ""},
		{"capture over 1h", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Duration = metav1.Duration{Duration: 61 * time.Minute} }), "duration must be between 1s and 1h"},
		{"capture of 0s", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Duration = metav1.Duration{} }), "duration must be between 1s and 1h"},
		{"chunk too small", packets(func(p *v1alpha1.PacketCaptureSpec) { p.ChunkSize = q("512Ki") }), "chunkSize must be between 1Mi and 1Gi"},
		{"chunk too big", packets(func(p *v1alpha1.PacketCaptureSpec) { p.ChunkSize = q("2Gi") }), "chunkSize must be between 1Mi and 1Gi"},
		{"interface with shell", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Interface = "eth0;reboot" }), "spec.packetCapture.interface"},
		{"interface too long", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Interface = "abcdefghijklmnop" }), "spec.packetCapture.interface"},
		{"filter as option", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Filter = "-w /etc/cron.d/x" }), "filter must not start with '-'"},
		{"filter with newline", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Filter = "tcp\nport 1" }), "filter must be printable ASCII"},
		{"no destination nor upload URL", packets(func(p *v1alpha1.PacketCaptureSpec) { p.UploadURLs = nil }), "packetCapture needs exactly one of destination: node, uploadURLs and upload"},
		{"capture kept on the node", packets(func(p *v1alpha1.PacketCaptureSpec) { p.UploadURLs, p.Destination = nil, "node" }), ""},
		{"node and upload URLs", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Destination = "node" }), "packetCapture needs exactly one of destination: node, uploadURLs and upload"},
		{"other capture destination", packets(func(p *v1alpha1.PacketCaptureSpec) { p.UploadURLs, p.Destination = nil, "s3" }), "Unsupported value"},
		{"chunks of a capture kept on the node", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs, p.Destination, p.ChunkSize = nil, "node", q("8Mi")
		}), "chunkSize applies to uploadURLs and upload only"},
		{"POST policy", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs, p.Upload = nil, post("https://b.s3.eu-west-1.amazonaws.com/b", nil)
		}), ""},
		{"POST policy and upload URLs", packets(func(p *v1alpha1.PacketCaptureSpec) { p.Upload = post("https://b.s3.amazonaws.com/b", nil) }), "packetCapture needs exactly one of"},
		{"POST policy to metadata", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs, p.Upload = nil, post("https://169.254.169.254/b", nil)
		}), "upload url must not be a loopback, link-local"},
		{"POST policy over http", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs, p.Upload = nil, post("http://b.s3.amazonaws.com/b", nil)
		}), "upload url must be https://"},
		{"POST policy without policy", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs, p.Upload = nil, post("https://b.s3.amazonaws.com/b", func(f map[string]string) { delete(f, "policy"); f["acl"] = "private" })
		}), "fields.key and fields.policy are required"},
		{"http upload URL", packets(func(p *v1alpha1.PacketCaptureSpec) { p.UploadURLs = []v1alpha1.UploadURL{"http://x.example.com/c"} }), "upload URLs must be https://"},
		{"metadata upload URL", packets(func(p *v1alpha1.PacketCaptureSpec) {
			p.UploadURLs = []v1alpha1.UploadURL{"https://ok.example.com/0", "https://169.254.169.254/1"}
		}), "upload URL must not be a loopback, link-local"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("admission-%d", i)}, Spec: tc.spec}
			err := k8s.Create(context.Background(), obj)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("rejected a valid object: %v", err)
				}
				_ = k8s.Delete(context.Background(), obj)
				return
			}
			if err == nil {
				_ = k8s.Delete(context.Background(), obj)
				t.Fatalf("accepted an invalid object; want rejection containing %q", tc.wantErr)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("rejection %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestDestinationDefaultsToNode(t *testing.T) {
	obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: "default-destination"}, Spec: logs("", nil)}
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
	if obj.Spec.LogCapture.Destination != v1alpha1.DestinationNode {
		t.Fatalf("destination = %q, want the default %q", obj.Spec.LogCapture.Destination, v1alpha1.DestinationNode)
	}
}

func TestNodeNameImmutable(t *testing.T) {
	ctx := context.Background()
	obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: "immutable"}, Spec: logs("node", nil)}
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	obj.Spec.NodeName = "node-b"
	if err := k8s.Update(ctx, obj); err == nil || !strings.Contains(err.Error(), "nodeName is immutable") {
		t.Fatalf("update of nodeName: %v, want 'nodeName is immutable'", err)
	}
	// The rest of the spec may change (a new generation, run again).
	obj.Spec.NodeName = "node-a"
	obj.Spec.LogCapture.Categories = []v1alpha1.LogCategory{"kernel"}
	if err := k8s.Update(ctx, obj); err != nil {
		t.Fatalf("update of categories: %v", err)
	}
}

// TestSelectableNodeName checks that the API server filters by spec.nodeName
// (CRD selectableFields): the agent's watch depends on it.
func TestSelectableNodeName(t *testing.T) {
	ctx := context.Background()
	for i, node := range []string{"sel-a", "sel-b", "sel-a"} {
		obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sel-%d", i)},
			Spec: v1alpha1.NodeDiagnosticSpec{NodeName: node, LogCapture: &v1alpha1.LogCaptureSpec{}}}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	}
	var list v1alpha1.NodeDiagnosticList
	if err := k8s.List(ctx, &list, client.MatchingFields{"spec.nodeName": "sel-a"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	if strings.Join(names, ",") != "sel-0,sel-2" {
		t.Fatalf("field selector spec.nodeName=sel-a listed %v", names)
	}
}

// TestStatusFileNameIsAPlainFileName: status.logCapture.fileName becomes a
// path (on the node proxy, in kubectl mend logs' output directory), so the
// API server refuses anything but a plain file name in it.
func TestStatusFileNameIsAPlainFileName(t *testing.T) {
	ctx := context.Background()
	obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: "file-name"}, Spec: logs("node", nil)}
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	for name, allowed := range map[string]bool{
		"nodediagnostic-file-name-20260101T000000Z.tar.gz": true,
		"a":                 true,
		"bundle_1.tar.gz":   true,
		"../../etc/passwd":  false,
		"..":                false,
		"a..b":              false,
		"/etc/passwd":       false,
		"dir/bundle.tar.gz": false,
		`dir\bundle.tar.gz`: false,
		".hidden":           false,
		"-rf":               false,
		"bundle.tar.gz\n":   false,
		"bundle\x1b[2J.tgz": false,
		"bündle.tar.gz":     false,
		"%2e%2e%2fpasswd":   false,
		"bundle.tar.gz?x=1": false,
	} {
		if v1alpha1.ValidFileName(name) != allowed {
			t.Errorf("ValidFileName(%q) = %v, the CRD's rule says %v", name, !allowed, allowed)
		}
		obj.Status = v1alpha1.NodeDiagnosticStatus{LogCapture: &v1alpha1.CaptureStatus{State: v1alpha1.CaptureCompleted, FileName: name}}
		err := k8s.Status().Update(ctx, obj)
		switch {
		case allowed && err != nil:
			t.Errorf("fileName %q refused: %v", name, err)
		case !allowed && (err == nil || !strings.Contains(err.Error(), "fileName must be a plain file name")):
			t.Errorf("fileName %q: %v, want a refusal", name, err)
		}
		if err == nil {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				t.Fatal(err)
			}
		}
	}
}
