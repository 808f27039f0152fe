package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/fakes3"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

const (
	s3Bucket = "diag-bucket"
	s3Region = "eu-west-1"
	s3Key    = "AKIAIOSFODNN7EXAMPLE"
	s3Secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// s3World is an S3 server (gofakes3 behind a SigV4 and POST policy gate)
// on a test host of its own over TLS, and an AWS environment for the
// plugin that has nothing but a shared config file: the SDK's standard
// chain finds the credentials there, and never asks an instance metadata
// service (AWS_EC2_METADATA_DISABLED).
type s3World struct {
	srv *fakes3.Server
	tls *diagtest.TLSServer
}

func newS3World(t *testing.T) *s3World {
	t.Helper()
	srv, err := fakes3.New(s3Key, s3Secret, s3Region, s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w := &s3World{srv: srv, tls: diagtest.NewTLSServer(t, srv)}
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = AKIAWRONGWRONGWRONG0\naws_secret_access_key = wrongwrongwrong\n\n"+
		"[incident]\naws_access_key_id = "+s3Key+"\naws_secret_access_key = "+s3Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_CONFIG_FILE": filepath.Join(dir, "config"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
	} {
		t.Setenv(k, v)
	}
	return w
}

// agentUploads lets an agent reach the S3 server (a private test address)
// and trust its certificate.
func (w *s3World) agentUploads(o *diagnostics.Options) {
	ip, _ := netip.AddrFromSlice(w.tls.IP)
	o.Uploader = &upload.Uploader{Policy: upload.Policy{Allow: []netip.Prefix{netip.PrefixFrom(ip.Unmap(), 32)}}, RootCAs: w.tls.Pool}
}

func (w *s3World) args(extra ...string) []string {
	return append([]string{"--s3", s3Bucket, "--region", s3Region, "--profile", "incident", "--s3-endpoint", w.tls.URL}, extra...)
}

func tarNames(t *testing.T, data []byte) map[string]bool {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name[strings.Index(h.Name, "/")+1:]] = true
	}
}

// TestLogsS3ThreeNodes: `kubectl mend logs --s3` presigns one PUT per node
// with the profile's credentials; the three agents upload their bundles to
// [PREFIX/]NODE/TIME-logs.tar.gz, each upload's signature verified by the
// server, and nothing is downloaded.
func TestLogsS3ThreeNodes(t *testing.T) {
	w := newS3World(t)
	var nodes []string
	for i := 0; i < 3; i++ {
		h := diagtest.NewHost(t)
		n := kubeletNode(t, h)
		startAgent(t, n, h, w.agentUploads)
		nodes = append(nodes, n)
	}
	dir := t.TempDir()
	out, err := run(t, append(append([]string{"--kubeconfig", kubeconfig(t, cfg), "logs", "--progress", "plain", "-o", dir, "--categories", "base,nodemend"},
		w.args("--key", "incidents/INC-42/")...), nodes...)...)
	if err != nil {
		t.Fatal(err)
	}
	if r := w.srv.Refusals(); len(r) > 0 {
		t.Fatalf("the server refused: %v", r)
	}
	keys, err := w.srv.Keys(s3Bucket, "incidents/INC-42/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("keys %v, want one bundle per node", keys)
	}
	for i, n := range nodes {
		if !strings.HasPrefix(keys[i], "incidents/INC-42/"+n+"/") || !strings.HasSuffix(keys[i], "-logs.tar.gz") {
			t.Errorf("key %s for node %s", keys[i], n)
		}
		data, err := w.srv.Object(s3Bucket, keys[i])
		if err != nil {
			t.Fatal(err)
		}
		if names := tarNames(t, data); !names["manifest.json"] || !names["base/summary.txt"] {
			t.Errorf("%s: bundle entries %v", keys[i], names)
		}
		if !strings.Contains(out, "s3://"+s3Bucket+"/"+keys[i]) {
			t.Errorf("the output does not name s3://%s/%s", s3Bucket, keys[i])
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("something was downloaded: %v", entries)
	}
}

// TestS3GateVerifies: the server's gate refuses what S3 would: a signature
// made with the wrong key (the default profile's), and a PUT whose
// signature was tampered with.
func TestS3GateVerifies(t *testing.T) {
	w := newS3World(t)
	h := diagtest.NewHost(t)
	n := kubeletNode(t, h)
	startAgent(t, n, h, w.agentUploads)
	_, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", "--progress", "plain", "--categories", "base",
		"--s3", s3Bucket, "--region", s3Region, "--s3-endpoint", w.tls.URL, n) // default profile: wrong key
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("err = %v, want the upload refused (403)", err)
	}
	if r := w.srv.Refusals(); len(r) == 0 || !strings.Contains(r[0], "unknown access key") {
		t.Fatalf("refusals %v", r)
	}
	// A valid presigned URL with one character of its signature changed.
	o := s3Options{bucket: s3Bucket, region: s3Region, profile: "incident", endpoint: w.tls.URL, expires: 3600e9}
	p, err := o.presigner(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u, err := p.put(t.Context(), "x/tampered")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(u, "X-Amz-Signature=") + len("X-Amz-Signature=")
	bad := u[:i] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", u[i])+1)%16]) + u[i+1:]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.tls.Pool}}}
	for _, url := range []string{bad, u} {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader("data"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 403, false: 200}[url == bad]; resp.StatusCode != want {
			t.Errorf("PUT (tampered %v): %d, want %d", url == bad, resp.StatusCode, want)
		}
	}
}

// TestCaptureS3PostPolicy: `kubectl mend capture --s3` presigns one POST
// policy; the agent's real tcpdump capture is posted with it, the key's
// ${filename} filled in with the chunk's name, the policy's signature and
// conditions verified by the server.
func TestCaptureS3PostPolicy(t *testing.T) {
	w := newS3World(t)
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	startAgent(t, node, h, func(o *diagnostics.Options) {
		o.Capturer = &pcap.Tcpdump{Commands: command.Exec{}}
		w.agentUploads(o)
	})
	stop := make(chan struct{})
	defer close(stop)
	port := talk(t, stop)
	out, err := run(t, append([]string{"--kubeconfig", kubeconfig(t, cfg), "capture", node, "--interface", "lo",
		"--filter", "tcp port " + strconv.Itoa(port), "--duration", "3s", "--progress", "plain"}, w.args("--key", "captures")...)...)
	if err != nil {
		t.Fatal(err)
	}
	if r := w.srv.Refusals(); len(r) > 0 {
		t.Fatalf("the server refused: %v", r)
	}
	keys, err := w.srv.Keys(s3Bucket, "captures/"+node+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.HasSuffix(keys[0], "-00000.pcap.gz") || !strings.Contains(keys[0], "-capture/nodediagnostic-") {
		t.Fatalf("keys %v", keys)
	}
	data, err := w.srv.Object(s3Bucket, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(gz)
	if len(raw) < 24 || !bytes.Equal(raw[:4], []byte{0xd4, 0xc3, 0xb2, 0xa1}) && !bytes.Equal(raw[:4], []byte{0x4d, 0x3c, 0xb2, 0xa1}) {
		t.Fatalf("the chunk is no pcap stream (%d bytes)", len(raw))
	}
	if !strings.Contains(out, "uploaded") || !strings.Contains(out, "s3://"+s3Bucket+"/captures/"+node+"/") {
		t.Errorf("output does not say where the chunks went")
	}
}
