package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/repair/ladder"
)

// Every flag is documented in docs/repair.md, with its default.
func TestEveryFlagIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "repair.md"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "")
	newCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(string(doc), "`--"+f.Name+"`") {
			t.Errorf("--%s is not documented in docs/repair.md", f.Name)
		}
	})
}

func TestFlagDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	fl := newCommand().Flags()
	want := map[string]string{
		"leader-elect": "true", "namespace": "nodemend-system", "pause-configmap": "nodemend-pause",
		"agent-config":     "nodemend-agent-config", // the agents' ConfigMap the chart deploys
		"recheck-interval": "5m0s", "dry-run": "false", "backend": "",
		"pprof-bind-address": "0",  // profiles only when a person asks for them
		"kube-api-qps":       "-1", // no client-side limit: Priority and Fairness (docs/repair.md)
		"agent-silence":      "15m0s",
	}
	for name, v := range want {
		if got := fl.Lookup(name).DefValue; got != v {
			t.Errorf("--%s default %q, want %q", name, got, v)
		}
	}
}

func TestRunRefusesAnUnknownBackend(t *testing.T) {
	if err := run(t.Context(), flags{backend: "terraform", namespace: "x"}); err == nil || !strings.Contains(err.Error(), "--backend") {
		t.Errorf("run = %v", err)
	}
}

// A zero rate would be client-go's 5/s, and a positive one without burst
// would admit nothing: both are refused before anything starts.
func TestRunRefusesARateLimitThatIsNotOne(t *testing.T) {
	for _, f := range []flags{{qps: 0, burst: 300}, {qps: 50, burst: 0}} {
		f.namespace = "x"
		if err := run(t.Context(), f); err == nil || !strings.Contains(err.Error(), "--kube-api-qps") {
			t.Errorf("qps %v burst %d: run = %v", f.qps, f.burst, err)
		}
	}
}

// A bound shorter than the floor is refused before anything starts.
func TestRunRefusesAnAgentSilenceBelowTheFloor(t *testing.T) {
	f := flags{namespace: "x", qps: -1, agentSilence: ladder.MinAgentSilence - time.Second}
	if err := run(t.Context(), f); err == nil || !strings.Contains(err.Error(), "--agent-silence") {
		t.Errorf("run = %v", err)
	}
}

// The floor is what its comment says it is: above one of the agent's
// default heartbeats with the clock skew allowed between node and control
// plane; the default waits out at least two missed heartbeats.
func TestAgentSilenceFloorCoversTheAgentsHeartbeat(t *testing.T) {
	// The agent's default exporter.heartbeat (pkg/agent/config and the
	// exporter take it from the same constant).
	const hb = v1alpha1.DefaultAgentHeartbeat
	if min := hb + v1alpha1.DefaultMaxClockSkew; ladder.MinAgentSilence <= min {
		t.Errorf("floor %v is not above the agent's default heartbeat and the clock skew (%v)", ladder.MinAgentSilence, min)
	}
	if ladder.DefaultAgentSilence < 3*hb {
		t.Errorf("default %v is less than three of the agent's default heartbeats (%v)", ladder.DefaultAgentSilence, hb)
	}
}

// The binary's wiring end to end, on a real API server with the real clock:
// a node unhealthy for an hour is repaired (plain node, with
// --replace-unowned-nodes: deleted), with JSON
// logs that carry controller, reconcileID and Node; and --agent-silence
// reaches the ladder: a node whose agent last wrote 8 minutes ago, under
// a 7-minute bound, has its Reboot skipped as silent, naming that bound.
func TestRunRepairsANode(t *testing.T) {
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(testenv.RepoRoot(), "deploy", "crds", "nodemend.dev_noderepairpolicies.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := t.Context()
	cs := env.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodemend-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hourAgo := metav1.NewTime(time.Now().Add(-time.Hour))
	// n9's policy: its own ladder, Reboot then Quarantine.
	pol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRepairPolicy", "metadata": map[string]any{"name": "silent"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"silent": "true"}}, "weight": int64(100), "maxUnhealthy": "100%",
			"rules":  []any{map[string]any{"conditionType": "KernelReady", "status": "False", "toleration": "1m"}},
			"ladder": []any{map[string]any{"action": "Reboot"}, map[string]any{"action": "Quarantine"}},
		},
	}}
	if _, err := dynamic.NewForConfigOrDie(env.Config).Resource(v1alpha1.GroupVersion.WithResource("noderepairpolicies")).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}}
		if i == 9 {
			node.Labels = map[string]string{"silent": "true"}
		}
		n, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status, heartbeat := corev1.ConditionTrue, hourAgo
		switch i {
		case 0:
			status = corev1.ConditionFalse
		case 9:
			status, heartbeat = corev1.ConditionFalse, metav1.NewTime(time.Now().Add(-8*time.Minute))
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: "KernelReady", Status: status, Reason: "KernelDeadlock", LastTransitionTime: hourAgo, LastHeartbeatTime: heartbeat}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, flags{kubeconfig: kubeconfig, namespace: "nodemend-system", leaderElect: true, leaderElectionID: "nodemend-controller",
			metricsAddr: "0", healthAddr: "0", pauseConfigMap: "nodemend-pause", recheckInterval: time.Minute, drainPollInterval: time.Second,
			terminationTimeout: time.Minute, agentSilence: 7 * time.Minute, concurrency: 2, qps: 50, burst: 100, logOut: logs, replaceUnowned: true})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := cs.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{})
		skipped := strings.Contains(logs.String(), "its agent's last heartbeat was 8m") && strings.Contains(logs.String(), "more than the 7m0s bound")
		if apierrors.IsNotFound(err) && skipped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n0 not repaired (%v), or n9's Reboot not skipped under the 7m0s bound (%v); logs:\n%s", err, skipped, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if entry["msg"] == "repair started" {
			found = true
			for _, k := range []string{"controller", "reconcileID", "Node"} {
				if _, ok := entry[k]; !ok {
					t.Errorf("log line lacks %q: %s", k, line)
				}
			}
		}
	}
	if !found {
		t.Errorf("no \"repair started\" log line:\n%s", logs.String())
	}
	for i := 1; i < 10; i++ {
		if _, err := cs.CoreV1().Nodes().Get(ctx, fmt.Sprintf("n%d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("n%d: %v", i, err)
		}
	}
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A storm's lines are all kept: a thousand repairs started in a second are
// a thousand log lines, none sampled away.
func TestLoggerKeepsEveryLineOfAStorm(t *testing.T) {
	var out bytes.Buffer
	log := newLogger(zapcore.InfoLevel, &out)
	for i := range 1000 {
		log.Info("repair started", "node", fmt.Sprintf("n-%d", i))
	}
	log.V(1).Info("a debug line")
	if n := strings.Count(out.String(), `"msg":"repair started"`); n != 1000 {
		t.Errorf("%d of 1000 lines logged", n)
	}
	if strings.Contains(out.String(), "a debug line") {
		t.Error("a debug line at info level")
	}
}
