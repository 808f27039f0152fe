package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/monitors"
)

// TestDiagnosticsHook: an agent started with DiagnosticsOptions serves its
// node's NodeDiagnostics, and the bundle carries the agent's effective
// config and metrics. It has its own API server: the one of this package's
// other tests has no CRDs.
func TestDiagnosticsHook(t *testing.T) {
	ctx := context.Background()
	_, nd := startDiagnosticsAgent(t, "diag-hook-node", hostroot.New(t).WithProc(), "", nil)
	obj, err := nd.Create(ctx, &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.NodeDiagnosticSpec{NodeName: "diag-hook-node", LogCapture: &v1alpha1.LogCaptureSpec{Categories: []v1alpha1.LogCategory{"nodemend"}}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := nd.Get(ctx, obj.Name)
		if err != nil {
			t.Fatal(err)
		}
		if st := got.Status.LogCapture; st != nil && st.State == v1alpha1.CaptureCompleted {
			if len(st.Errors) != 0 || !strings.Contains(st.Message, "0 failed, 0 did not apply") {
				t.Fatalf("nodemend category: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bundle; status %+v", got.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startDiagnosticsAgent starts an API server with nodemend's CRDs (the one
// of this package's other tests has none) and an agent serving the
// NodeDiagnostics of node over root, with cfg appended to the file journal
// config; mut adjusts the agent's options.
func startDiagnosticsAgent(t *testing.T, node string, root *hostroot.Root, cfg string, mut func(*Options)) (*testenv.Env, *mendclient.Client) {
	t.Helper()
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(testenv.RepoRoot(), "deploy", "crds")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+cfg)
	core, err := coreclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Client: core, NodeName: node, HostRoot: root.Path(""), ConfigPath: root.Path("etc/nodemend/agent.yaml"),
		ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}},
		Diagnostics: DiagnosticsOptions{Config: env.Config},
	}
	if mut != nil {
		mut(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	nd, err := mendclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return env, nd
}
