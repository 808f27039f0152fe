package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

var (
	cfg  *rest.Config
	core kubernetes.Interface
	// agentCore is the agents' client.
	agentCore *coreclient.Client
	nd        *mendclient.Client
)

func TestMain(m *testing.M) {
	engines, err := testenv.EngineCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{testenv.NodemendCRDs(), engines}}, func(env *testenv.Env) error {
		cfg, core = env.Config, env.Client
		var err error
		if agentCore, err = coreclient.New(cfg); err != nil {
			return err
		}
		nd, err = mendclient.New(cfg)
		return err
	})
}

// kubeconfig writes a kubeconfig for the test API server's admin.
func kubeconfig(t *testing.T, c *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData, Token: c.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs `kubectl mend ARGS...` in process.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	t.Logf("kubectl mend %s:\n%s(err: %v)", strings.Join(args, " "), out.String(), err)
	return out.String(), err
}

var seq atomic.Int32

// kubeletNode is a Node whose kubelet is a test HTTPS server serving the
// fake host's /var/log at /logs/, as the kubelet does: the API server's
// node proxy really connects to it. The API server refuses to proxy to
// loopback node addresses, so it listens on a namespaced test host
// (diagtest.NewTLSServer).
func kubeletNode(t *testing.T, h *diagtest.Host) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(h.Path("var/log")))))
	kubelet := diagtest.NewTLSServer(t, mux)
	_, portStr, _ := strings.Cut(strings.TrimPrefix(kubelet.URL, "https://"), ":")
	port, _ := strconv.Atoi(portStr)
	name := fmt.Sprintf("mend-node-%d", seq.Add(1))
	n, err := core.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "gpu"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: kubelet.IP.String()}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if _, err := core.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// startAgent runs the agent's diagnostics component for node over h.
func startAgent(t *testing.T, node string, h *diagtest.Host, mut func(*diagnostics.Options)) {
	t.Helper()
	opts := diagnostics.Options{
		Config: cfg, Client: agentCore, NodeName: node, HostRoot: h.Root.Dir, Commands: h.Script, Netlink: h.Netlink, DiskFull: h.DiskFull,
		EffectiveConfig: func() any { return h.EffectiveConfig }, Log: testr.New(t),
	}
	if mut != nil {
		mut(&opts)
	}
	r, err := diagnostics.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// slowed adds a collector that takes a moment, so that progress shows.
func slowed(e *collectors.Env, cats []v1alpha1.LogCategory) []collect.Collector {
	return append(collectors.For(e, cats), collect.Collector{Name: "base/slow", Category: "base", Run: func(ctx context.Context, out *collect.Output) error {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return out.WriteFile("slow.txt", []byte("done\n"))
	}})
}

func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return diagtest.Untar(t, f)
}

// TestLogsEndToEnd: kubectl mend logs creates the request, the agent
// collects, the bundle comes down through the API server's node proxy from
// the stand-in kubelet, has every category and none of the planted
// secrets, and the request is cleaned up.
func TestLogsEndToEnd(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	startAgent(t, node, h, func(o *diagnostics.Options) { o.Collectors = slowed })
	dir := t.TempDir()
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", node, "-o", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"validating", "collecting", "downloading", "saved"} {
		if !strings.Contains(out, node+"  "+phase) {
			t.Errorf("no %q progress line", phase)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, node, "nodediagnostic-*.tar.gz"))
	if len(files) != 1 {
		t.Fatalf("saved files %v", files)
	}
	bundle := untar(t, files[0])
	for _, cat := range v1alpha1.AllLogCategories() {
		n := 0
		for name := range bundle {
			if strings.HasPrefix(name, string(cat)+"/") {
				n++
			}
		}
		if n == 0 {
			t.Errorf("bundle has no %s files", cat)
		}
	}
	for name, content := range bundle {
		for _, s := range h.Secrets {
			if strings.Contains(content, s) {
				t.Errorf("planted secret %q survived in %s", s, name)
			}
		}
	}
	list, err := nd.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Items {
		if o.Spec.NodeName == node {
			t.Errorf("nodediagnostic/%s left behind", o.Name)
		}
	}
}

// TestLogsSelectorAndReuse: nodes by label; a kept recent bundle of the
// same request is reused instead of collected again.
func TestLogsSelectorAndReuse(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	if _, err := core.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"mend-test":"`+node+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, node, h, nil)
	kc := kubeconfig(t, cfg)
	if _, err := run(t, "--kubeconfig", kc, "logs", "-l", "mend-test="+node, "-o", t.TempDir(), "--keep", "--categories", "base,kernel"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "--kubeconfig", kc, "logs", node, "-o", t.TempDir(), "--categories", "kernel,base")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "reusing nodediagnostic/") {
		t.Fatalf("did not reuse the kept bundle")
	}
}

func TestLogsUploadURL(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	var mu sync.Mutex
	var got []byte
	srv := diagtest.NewTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = b
		mu.Unlock()
	}))
	ip, _ := netip.AddrFromSlice(srv.IP)
	startAgent(t, node, h, func(o *diagnostics.Options) {
		o.Uploader = &upload.Uploader{Policy: upload.Policy{Allow: []netip.Prefix{netip.PrefixFrom(ip.Unmap(), 32)}}, RootCAs: srv.Pool}
	})
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "logs", node, "--upload-url", srv.URL+"/b.tgz?sig=x")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !strings.Contains(out, "uploaded") {
		t.Fatalf("uploaded %d bytes", len(got))
	}
}

func TestLogsErrors(t *testing.T) {
	kc := kubeconfig(t, cfg)
	t.Run("node not found", func(t *testing.T) {
		_, err := run(t, "--kubeconfig", kc, "logs", "no-such-node")
		if err == nil || err.Error() != `node "no-such-node" not found` {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no agent answers", func(t *testing.T) {
		node := kubeletNode(t, diagtest.NewHost(t))
		_, err := run(t, "--kubeconfig", kc, "logs", node, "--agent-timeout", "1s", "-o", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "no nodemend-agent answered for node "+node+" within 1s") {
			t.Fatalf("got %v", err)
		}
		list, _ := nd.List(context.Background(), metav1.ListOptions{})
		for _, o := range list.Items {
			if o.Spec.NodeName == node {
				t.Errorf("nodediagnostic/%s left behind after a failure", o.Name)
			}
		}
	})
	t.Run("timeout", func(t *testing.T) {
		h := diagtest.NewHost(t)
		node := kubeletNode(t, h)
		startAgent(t, node, h, func(o *diagnostics.Options) {
			o.Collectors = func(*collectors.Env, []v1alpha1.LogCategory) []collect.Collector {
				return []collect.Collector{{Name: "base/forever", Category: "base", Timeout: time.Hour, Run: func(ctx context.Context, _ *collect.Output) error {
					<-ctx.Done()
					return nil
				}}}
			}
		})
		_, err := run(t, "--kubeconfig", kc, "logs", node, "--timeout", "3s", "-o", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "timed out after 3s while collecting") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{{"logs"}, {"logs", "a", "-l", "x=y"}, {"logs", "a", "b", "--upload-url", "https://x/y"},
			{"logs", "a", "--upload-url", "http://x/y"}, {"logs", "a", "--categories", "everything"}} {
			if _, err := run(t, append([]string{"--kubeconfig", kc}, args...)...); err == nil {
				t.Errorf("%v accepted", args)
			}
		}
	})
}

// TestLogsRBAC: a user who may request bundles but not use the node proxy
// is told exactly which permission is missing, before anything is created.
func TestLogsRBAC(t *testing.T) {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mend-no-proxy"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"nodemend.dev"}, Resources: []string{"nodediagnostics"}, Verbs: []string{"create", "get", "list", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
	}}
	if _, err := core.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mend-no-proxy"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "mend-no-proxy"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}
	if _, err := core.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	node := kubeletNode(t, diagtest.NewHost(t))
	_, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "--as", "alice", "logs", node)
	if err == nil || !strings.Contains(err.Error(), "RBAC: you are not allowed to get nodes/proxy (to download bundles through the API server's node proxy") {
		t.Fatalf("got %v", err)
	}
	// With no rights at all, every missing one is named.
	_, err = run(t, "--kubeconfig", kubeconfig(t, cfg), "--as", "mallory", "logs", node)
	if err == nil || !strings.Contains(err.Error(), "create nodediagnostics.nodemend.dev") {
		t.Fatalf("got %v", err)
	}
}

// TestLogsCRDMissing runs against an API server without nodemend's CRDs.
func TestLogsCRDMissing(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	_, err = run(t, "--kubeconfig", kubeconfig(t, env.Config), "logs", "some-node")
	if err == nil || !strings.Contains(err.Error(), "the NodeDiagnostic CRD (nodediagnostics.nodemend.dev) is not installed") {
		t.Fatalf("got %v", err)
	}
}

func TestReusable(t *testing.T) {
	now := time.Date(2024, 6, 12, 10, 30, 0, 0, time.UTC)
	spec := (&logsOptions{categories: []string{"kernel", "base"}}).spec("n")
	mk := func(name string, age, expiresIn time.Duration, state v1alpha1.CaptureState, cats ...v1alpha1.LogCategory) v1alpha1.NodeDiagnostic {
		exp := metav1.NewTime(now.Add(expiresIn))
		return v1alpha1.NodeDiagnostic{
			ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       v1alpha1.NodeDiagnosticSpec{NodeName: "n", LogCapture: &v1alpha1.LogCaptureSpec{Destination: "node", Categories: cats}},
			Status:     v1alpha1.NodeDiagnosticStatus{LogCapture: &v1alpha1.CaptureStatus{State: state, Generation: 1, FileName: name + ".tar.gz", ExpiryTime: &exp}},
		}
	}
	cases := []struct {
		name  string
		items []v1alpha1.NodeDiagnostic
		want  string
	}{
		{"newest matching", []v1alpha1.NodeDiagnostic{
			mk("old", 4*time.Minute, 6*time.Minute, v1alpha1.CaptureCompleted, "base", "kernel"),
			mk("new", time.Minute, 9*time.Minute, v1alpha1.CaptureCompleted, "base", "kernel"),
		}, "new"},
		{"expiring soon", []v1alpha1.NodeDiagnostic{mk("a", 9*time.Minute, time.Minute, v1alpha1.CaptureCompleted, "base", "kernel")}, ""},
		{"other categories", []v1alpha1.NodeDiagnostic{mk("a", time.Minute, 9*time.Minute, v1alpha1.CaptureCompleted, "base")}, ""},
		{"still running", []v1alpha1.NodeDiagnostic{mk("a", time.Minute, 9*time.Minute, v1alpha1.CaptureRunning, "base", "kernel")}, ""},
		{"too old", []v1alpha1.NodeDiagnostic{mk("a", 6*time.Minute, 9*time.Minute, v1alpha1.CaptureCompleted, "base", "kernel")}, ""},
	}
	for _, tc := range cases {
		got := reusable(tc.items, spec, now)
		if (got == nil && tc.want != "") || (got != nil && got.Name != tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, got, tc.want)
		}
	}
}
