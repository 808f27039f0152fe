package diagnostics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
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
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{testenv.NodemendCRDs()}}, func(env *testenv.Env) error {
		cfg, core = env.Config, env.Client
		var err error
		if agentCore, err = coreclient.New(cfg); err != nil {
			return err
		}
		nd, err = mendclient.New(cfg)
		return err
	})
}

var seq atomic.Int32

func newNode(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("diag-node-%d", seq.Add(1))
	if _, err := core.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// agent is a running Runner.
type agent struct {
	r        *Runner
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func (a *agent) stop(t *testing.T) {
	t.Helper()
	a.stopOnce.Do(func() {
		a.cancel()
		select {
		case err := <-a.done:
			if err != nil {
				t.Errorf("runner returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("runner did not stop")
		}
	})
}

func startAgent(t *testing.T, node string, h *diagtest.Host, mut func(*Options)) *agent {
	t.Helper()
	opts := Options{
		Config: cfg, Client: agentCore, NodeName: node, HostRoot: h.Root.Dir, Commands: h.Script, Netlink: h.Netlink, DiskFull: h.DiskFull,
		EffectiveConfig: func() any { return h.EffectiveConfig }, CollectorTimeout: 5 * time.Second,
		Log: testr.New(t),
	}
	if mut != nil {
		mut(&opts)
	}
	a := &agent{done: make(chan error, 1)}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a.r = r
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- r.Run(ctx) }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

func create(t *testing.T, node string, spec func(*v1alpha1.NodeDiagnosticSpec)) *v1alpha1.NodeDiagnostic {
	t.Helper()
	obj := &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"},
		Spec: v1alpha1.NodeDiagnosticSpec{NodeName: node, LogCapture: &v1alpha1.LogCaptureSpec{Destination: "node"}}}
	if spec != nil {
		spec(&obj.Spec)
	}
	out, err := nd.Create(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nd.Delete(context.Background(), out.Name) })
	return out
}

func waitFor(t *testing.T, name, what string, cond func(*v1alpha1.NodeDiagnostic) bool) *v1alpha1.NodeDiagnostic {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		obj, err := nd.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if cond(obj) {
			return obj
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, obj.Status)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func logState(s v1alpha1.CaptureState) func(*v1alpha1.NodeDiagnostic) bool {
	return func(o *v1alpha1.NodeDiagnostic) bool {
		return o.Status.LogCapture != nil && o.Status.LogCapture.State == s && o.Status.LogCapture.Generation == o.Generation
	}
}

func readBundle(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return diagtest.Untar(t, f)
}

func TestBundleOnNode(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	startAgent(t, node, h, nil)
	obj := create(t, node, nil)
	done := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	st := done.Status.LogCapture
	path := filepath.Join(h.Root.Dir, OutputSubdir, st.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != st.SizeBytes || st.StartTime == nil || st.CompletionTime == nil ||
		st.ExpiryTime == nil || st.CollectorsDone != st.CollectorsTotal || st.Attempts != 1 {
		t.Errorf("bundle %s mode %v size %d; status %+v", path, fi.Mode(), fi.Size(), st)
	}
	if dir, _ := os.Stat(filepath.Dir(path)); dir.Mode().Perm() != 0o700 {
		t.Errorf("output directory mode %v", dir.Mode())
	}
	cond := func(typ string) *metav1.Condition {
		for i := range done.Status.Conditions {
			if done.Status.Conditions[i].Type == typ {
				return &done.Status.Conditions[i]
			}
		}
		return nil
	}
	if c := cond(v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted condition %+v", c)
	}
	if c := cond(v1alpha1.ConditionLogsCollected); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Completed" {
		t.Errorf("LogsCollected condition %+v", c)
	}
	files := readBundle(t, path)
	for _, cat := range v1alpha1.AllLogCategories() {
		found := false
		for name := range files {
			if strings.HasPrefix(name, string(cat)+"/") {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s files in the bundle", cat)
		}
	}
	for name, content := range files {
		for _, s := range h.Secrets {
			if strings.Contains(content, s) {
				t.Errorf("secret %q in %s", s, name)
			}
		}
	}
	if !strings.Contains(files["nodemend/findings.yaml"], node) || !strings.Contains(files["base/node.yaml"], "name: "+node) {
		t.Errorf("nodemend findings / node identity from the API missing")
	}
	if !strings.Contains(files["manifest.json"], `"nodeDiagnostic": "`+obj.Name+`"`) {
		t.Errorf("manifest: %s", files["manifest.json"])
	}
}

// TestOwnNodeOnly: the agent sees only its node's objects (the API server
// filters on spec.nodeName) and touches nothing else.
func TestOwnNodeOnly(t *testing.T) {
	mine, other := newNode(t), newNode(t)
	h := diagtest.NewHost(t)
	a := startAgent(t, mine, h, nil)
	theirs := create(t, other, nil)
	ours := create(t, mine, nil)
	waitFor(t, ours.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	for _, key := range a.r.loop.Store().ListKeys() {
		obj, _, _ := a.r.loop.Store().GetByKey(key)
		if n := obj.(*v1alpha1.NodeDiagnostic).Spec.NodeName; n != mine {
			t.Errorf("the agent of %s received %s of node %s", mine, key, n)
		}
	}
	if got, _ := nd.Get(context.Background(), theirs.Name); got.Status.LogCapture != nil || len(got.Status.Conditions) > 0 {
		t.Errorf("another node's object got status %+v", got.Status)
	}
}

// TestNotRunAgainAfterRestart: a completed capture stays as it is when a
// new agent starts. The new agent's one worker syncs the objects it listed
// before one created later: once that one's capture has completed, the
// completed object has been synced.
func TestNotRunAgainAfterRestart(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	a := startAgent(t, node, h, nil)
	obj := create(t, node, nil)
	before := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	a.stop(t)
	calls := len(h.Script.Calls())

	b := startAgent(t, node, h, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, listed, _ := b.r.loop.Store().GetByKey(obj.Name); listed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new agent never listed the object")
		}
		time.Sleep(20 * time.Millisecond)
	}
	later := create(t, node, nil)
	waitFor(t, later.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	after, err := nd.Get(context.Background(), obj.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || len(h.Script.Calls()) != 2*calls {
		t.Fatalf("completed capture touched again (%d commands run for two captures, %d for one): status %+v",
			len(h.Script.Calls()), calls, after.Status.LogCapture)
	}
	entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir))
	if len(entries) != 2 {
		t.Fatalf("output dir has %d entries, want one bundle per capture", len(entries))
	}
}

// blocking collectors never finish before their context ends.
func blocking(started chan<- struct{}) func(*collectors.Env, []v1alpha1.LogCategory) []collect.Collector {
	return func(*collectors.Env, []v1alpha1.LogCategory) []collect.Collector {
		return []collect.Collector{{Name: "system/slow", Category: "system", Timeout: time.Hour, Run: func(ctx context.Context, out *collect.Output) error {
			_ = out.WriteFile("part", []byte("x"))
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}}}
	}
}

// TestRestartMidCapture: an agent stopped during a capture leaves it
// Running; the next agent runs it again (attempt 2) and completes it.
func TestRestartMidCapture(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	started := make(chan struct{}, 1)
	a := startAgent(t, node, h, func(o *Options) { o.Collectors = blocking(started) })
	obj := create(t, node, nil)
	waitFor(t, obj.Name, "Running", logState(v1alpha1.CaptureRunning))
	<-started
	a.stop(t)
	mid, _ := nd.Get(context.Background(), obj.Name)
	if mid.Status.LogCapture.State != v1alpha1.CaptureRunning {
		t.Fatalf("stopping the agent changed the capture to %+v", mid.Status.LogCapture)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir)); len(entries) != 0 {
		t.Errorf("a stopped capture left %d entries", len(entries))
	}
	startAgent(t, node, h, nil)
	done := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	if done.Status.LogCapture.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", done.Status.LogCapture.Attempts)
	}
}

func TestRestartLimit(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	started := make(chan struct{}, 1)
	a := startAgent(t, node, h, func(o *Options) { o.Collectors = blocking(started); o.MaxAttempts = 1 })
	obj := create(t, node, nil)
	waitFor(t, obj.Name, "Running", logState(v1alpha1.CaptureRunning))
	a.stop(t)
	startAgent(t, node, h, func(o *Options) { o.MaxAttempts = 1 })
	failed := waitFor(t, obj.Name, "Failed", logState(v1alpha1.CaptureFailed))
	if !strings.Contains(failed.Status.LogCapture.Message, "restarted") {
		t.Fatalf("message %q", failed.Status.LogCapture.Message)
	}
}

// TestHungCollector: a collector stuck past its timeout (ignoring its
// context) is abandoned; the bundle completes with its error entry.
func TestHungCollector(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	startAgent(t, node, h, func(o *Options) {
		o.Collectors = func(e *collectors.Env, c []v1alpha1.LogCategory) []collect.Collector {
			return append(collectors.For(e, []v1alpha1.LogCategory{"base"}), collect.Collector{Name: "storage/stuck", Category: "storage",
				Timeout: 100 * time.Millisecond, Run: func(context.Context, *collect.Output) error { <-hang; return nil }})
		}
	})
	obj := create(t, node, nil)
	done := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	errs := done.Status.LogCapture.Errors
	if len(errs) != 1 || errs[0].Collector != "storage/stuck" || !strings.Contains(errs[0].Message, "timed out") {
		t.Fatalf("errors %+v", errs)
	}
}

// TestSpecChangeRunsAgain: a new generation is a new capture.
func TestSpecChangeRunsAgain(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	startAgent(t, node, h, nil)
	obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) { s.LogCapture.Categories = []v1alpha1.LogCategory{"base"} })
	first := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	time.Sleep(1100 * time.Millisecond) // bundle names have second resolution
	first.Spec.LogCapture.Categories = []v1alpha1.LogCategory{"kernel"}
	if _, err := nd.Update(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	second := waitFor(t, obj.Name, "generation 2 Completed", logState(v1alpha1.CaptureCompleted))
	if second.Status.LogCapture.FileName == first.Status.LogCapture.FileName || second.Status.LogCapture.Generation != 2 {
		t.Fatalf("second capture %+v", second.Status.LogCapture)
	}
	files := readBundle(t, filepath.Join(h.Root.Dir, OutputSubdir, second.Status.LogCapture.FileName))
	if _, ok := files["kernel/dmesg.txt"]; !ok {
		t.Fatal("the new spec's category is not in the new bundle")
	}
}

// TestDeleteCancels: deleting the object stops its capture and removes the
// partial bundle.
func TestDeleteCancels(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	started := make(chan struct{}, 1)
	startAgent(t, node, h, func(o *Options) { o.Collectors = blocking(started) })
	obj := create(t, node, nil)
	<-started
	if err := nd.Delete(context.Background(), obj.Name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir))
		if len(entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancelled capture left %v", entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := nd.Get(context.Background(), obj.Name); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
}

// uploadServer is an HTTPS server that stores PUT bodies by path. It
// listens on a non-loopback address: admission refuses loopback URLs.
type uploadServer struct {
	*diagtest.TLSServer
	mu     sync.Mutex
	bodies map[string][]byte
}

func newUploadServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request) bool) *uploadServer {
	s := &uploadServer{bodies: map[string][]byte{}}
	s.TLSServer = diagtest.NewTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handler != nil && handler(w, r) {
			return
		}
		if r.Method != http.MethodPut {
			http.Error(w, "PUT only", http.StatusMethodNotAllowed)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.bodies[r.URL.Path] = b
		s.mu.Unlock()
	}))
	return s
}

func (s *uploadServer) body(path string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[path]
}

// uploader trusts the server and allows its (possibly private) address, as
// an agent configured for an in-cluster collector would.
func (s *uploadServer) uploader() *upload.Uploader {
	ip, _ := netip.AddrFromSlice(s.IP)
	return &upload.Uploader{Policy: upload.Policy{Allow: []netip.Prefix{netip.PrefixFrom(ip.Unmap(), 32)}}, RootCAs: s.Pool,
		BaseTimeout: 5 * time.Second, Backoff: 10 * time.Millisecond}
}

func TestBundleUpload(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	startAgent(t, node, h, func(o *Options) { o.Uploader = srv.uploader() })
	obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture.Destination = srv.URL + "/bucket/bundle.tar.gz?X-Amz-Signature=abc"
	})
	done := waitFor(t, obj.Name, "Completed", logState(v1alpha1.CaptureCompleted))
	body := srv.body("/bucket/bundle.tar.gz")
	if int64(len(body)) != done.Status.LogCapture.SizeBytes || len(body) == 0 {
		t.Fatalf("uploaded %d bytes, status says %d", len(body), done.Status.LogCapture.SizeBytes)
	}
	files := diagtest.Untar(t, strings.NewReader(string(body)))
	if _, ok := files["manifest.json"]; !ok {
		t.Fatal("uploaded bundle has no manifest")
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir)); len(entries) != 0 {
		t.Errorf("an uploaded bundle stays on the node: %v", entries)
	}
	if strings.Contains(done.Status.LogCapture.Message, "X-Amz-Signature") {
		t.Errorf("status shows the signed URL: %s", done.Status.LogCapture.Message)
	}
}

// TestUploadRefused: admission lets a private address through (the agent's
// configuration decides); this agent's does not allow it, and says why.
func TestUploadRefused(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	startAgent(t, node, h, nil)
	obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) { s.LogCapture.Destination = "https://10.1.2.3/upload" })
	failed := waitFor(t, obj.Name, "Failed", logState(v1alpha1.CaptureFailed))
	if !strings.Contains(failed.Status.LogCapture.Message, "10.1.2.3 is a private address") {
		t.Fatalf("message %q", failed.Status.LogCapture.Message)
	}
	var reason string
	for _, c := range failed.Status.Conditions {
		if c.Type == v1alpha1.ConditionLogsCollected {
			reason = c.Reason
		}
	}
	if reason != "UploadRefused" {
		t.Fatalf("condition reason %q", reason)
	}
}
