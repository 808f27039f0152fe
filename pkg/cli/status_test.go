package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// statusFleet creates a small fleet on the API server: pool "st-a" with a
// tolerating node and a draining one, pool "st-b" with two unhealthy of
// three (its gate closed), a vetoed node.
func statusFleet(t *testing.T) {
	now := time.Now()
	np := func(p string) map[string]string {
		return map[string]string{karpenter.NodePoolLabel: p, "st": "yes"}
	}
	ok := func(name, p string) { createNode(t, testNode{name: name, labels: np(p)}) }
	for _, n := range []string{"st-a-1", "st-a-2", "st-a-3", "st-a-4", "st-a-5", "st-a-6", "st-a-7", "st-a-8"} {
		ok(n, "st-a")
	}
	createNode(t, testNode{name: "st-a-tol", labels: np("st-a"), conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, now.Add(-time.Hour)),
		condition("AcceleratedHardwareReady", corev1.ConditionFalse, "NvidiaXID79Error", "GPU has fallen off the bus", now.Add(-4*time.Minute))}})
	createNode(t, testNode{name: "st-a-drain", labels: np("st-a"), annotations: map[string]string{record.StateAnnotation: v1alpha1.RepairRecord{
		Phase: record.PhaseDraining, Started: metav1.NewTime(now.Add(-2 * time.Minute)),
		Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelBug"}}.Encode()},
		taints: []corev1.Taint{record.Taint("KernelReady")}})
	ok("st-b-1", "st-b")
	for _, n := range []string{"st-b-bad1", "st-b-bad2"} {
		createNode(t, testNode{name: n, labels: np("st-b"), conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, now.Add(-time.Hour)),
			condition("KernelReady", corev1.ConditionFalse, "ForkFailedOutOfPIDs", "fork failed", now.Add(-time.Hour))}})
	}
	createNode(t, testNode{name: "st-veto", labels: map[string]string{"st": "yes"}, annotations: map[string]string{record.VetoAnnotation: "debugging"},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionFalse, now.Add(-time.Hour))}})
}

func TestStatus(t *testing.T) {
	statusFleet(t)
	kc := kubeconfig(t, cfg)
	r, rows := statusJSON(t, "st=yes")
	cases := []struct {
		node   string
		state  fleet.State
		gate   gate.Gate
		detail string
	}{
		{"st-a-1", fleet.Healthy, "", ""},
		{"st-a-tol", fleet.Tolerating, "", "left of 10m (AcceleratedHardwareReady=False/NvidiaXID79Error)"},
		{"st-a-drain", fleet.Draining, "", "deadline in"},
		{"st-b-bad1", fleet.Blocked, gate.Pool, "pool NodePool/st-b: 2 of 3 nodes unhealthy, more than the 1"},
		{"st-veto", fleet.Blocked, gate.Veto, "debugging"},
	}
	for _, tc := range cases {
		got, ok := rows[tc.node]
		if !ok || got.State != tc.state || got.Gate != tc.gate || !strings.Contains(got.Detail, tc.detail) {
			t.Errorf("%s: got %+v, want %s %s %q", tc.node, got, tc.state, tc.gate, tc.detail)
		}
	}
	if len(r.Nodes) != 14 {
		t.Errorf("-l st=yes: %d rows, want 14", len(r.Nodes))
	}
	for _, p := range r.Pools {
		if p.Name == "NodePool/st-b" && (!p.Blocked || p.Unhealthy != 2 || p.Allowed != 1) {
			t.Errorf("pool st-b %+v", p)
		}
	}

	// The table: rows, the pool line, no colour when not a terminal.
	out, err := run(t, "--kubeconfig", kc, "status", "-l", "st=yes")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"st-b-bad1", "blocked by pool gate: 2/3 unhealthy, 1 allowed", "ForkFailedOutOfPIDs",
		"NodePool/st-b", "BLOCKED: nothing here is repaired", "tolerating, ", "blocked: vetoed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour escapes written to a non-terminal")
	}
	out, err = run(t, "--kubeconfig", kc, "--color", "always", "status", "-l", "st=yes", "--unhealthy", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\x1b[31m✗") || strings.Contains(out, "st-a-1 ") || !strings.Contains(out, "POLICY") {
		t.Errorf("--color always --unhealthy -o wide: unexpected output")
	}

	// Paused: every due repair shows the pause.
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nodemend-pause"}, Data: map[string]string{"reason": "cluster upgrade"}}
	if _, err := core.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.CoreV1().ConfigMaps("default").Delete(context.Background(), "nodemend-pause", metav1.DeleteOptions{})
	})
	out, err = run(t, "--kubeconfig", kc, "status", "-l", "st=yes", "--controller-namespace", "default", "-o", "yaml")
	if err != nil || !strings.Contains(out, "pauseReason: cluster upgrade") || !strings.Contains(out, "repairs are paused cluster-wide: cluster upgrade") {
		t.Errorf("paused: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kc, "status", "-o", "table"); err == nil {
		t.Error("-o table accepted")
	}
}

// statusJSON is `kubectl mend status -l SELECTOR -o json`, decoded, with
// its rows by node name.
func statusJSON(t *testing.T, selector string) (fleet.Report, map[string]fleet.Node) {
	t.Helper()
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "status", "-l", selector, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r fleet.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	rows := map[string]fleet.Node{}
	for _, n := range r.Nodes {
		rows[n.Name] = n
	}
	return r, rows
}

// syncBuffer is a bytes.Buffer safe for the watch loop's writes and the
// test's reads.
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

// TestStatusWatch: --watch renders, then re-renders when a node changes.
func TestStatusWatch(t *testing.T) {
	createNode(t, testNode{name: "watched", labels: map[string]string{"w": "yes"}})
	var out syncBuffer
	root := NewRootCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	root.SetArgs([]string{"--kubeconfig", kubeconfig(t, cfg), "status", "-l", "w=yes", "--watch", "--watch-interval", "100ms", "-o", "json"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return strings.Contains(out.String(), `"state": "healthy"`) })
	n, err := core.CoreV1().Nodes().Get(ctx, "watched", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = append(n.Status.Conditions, condition("NetworkingReady", corev1.ConditionFalse, "InterfaceNotUp", "eth1 down", time.Now()))
	if _, err := core.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(out.String(), `"reason": "InterfaceNotUp"`) })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("timed out")
}
