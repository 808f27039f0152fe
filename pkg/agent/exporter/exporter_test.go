package exporter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

var (
	// client is the tests' own clientset; exporterClient the exporters'.
	client         kubernetes.Interface
	exporterClient *coreclient.Client
	env            *testenv.Env
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error {
		env, client = e, e.Client
		var err error
		exporterClient, err = coreclient.New(e.Config)
		return err
	})
}

type harness struct {
	t     *testing.T
	node  string
	clock *clocktesting.FakeClock
	exp   *Exporter
	stop  func()
}

var nodeSeq atomic.Int32

func newNode(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("node-%d", nodeSeq.Add(1))
	_, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func startExporter(t *testing.T, node string, clk *clocktesting.FakeClock, ms ...string) *harness {
	t.Helper()
	return startExporterWith(t, exporterClient, node, clk, ms...)
}

func startExporterWith(t *testing.T, c *coreclient.Client, node string, clk *clocktesting.FakeClock, ms ...string) *harness {
	t.Helper()
	e := New(Options{Client: c, NodeName: node, Clock: clk, Log: testr.New(t)})
	var mons []health.Monitor
	for _, name := range ms {
		m, ok := health.LookupMonitor(name)
		if !ok {
			t.Fatalf("no monitor %s", name)
		}
		mons = append(mons, m)
	}
	e.SetMonitors(mons)
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	h := &harness{t: t, node: node, clock: clk, exp: e, stop: func() { cancel(); <-done }}
	t.Cleanup(h.stop)
	return h
}

// eventually polls cond, moving the fake clock past the exporter's coalesce
// window so that pending writes go out.
func (h *harness) eventually(what string, cond func(*corev1.Node) bool) *corev1.Node {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		node, err := client.CoreV1().Nodes().Get(context.Background(), h.node, metav1.GetOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		if cond(node) {
			return node
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; conditions: %+v", what, node.Status.Conditions)
		}
		if h.clock.HasWaiters() {
			h.clock.Step(10 * time.Millisecond)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func cond(n *corev1.Node, t health.ConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == string(t) {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func hasStatus(t health.ConditionType, s corev1.ConditionStatus, reason string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := cond(n, t)
		return c != nil && c.Status == s && c.Reason == reason
	}
}

func detectionOf(t *testing.T, reason, msg string, observed time.Time) Detection {
	t.Helper()
	r, ok := health.LookupReason(reason)
	if !ok {
		t.Fatalf("unknown reason %s", reason)
	}
	return Detection{Reason: r, Finding: detection.Finding{Reason: reason, Message: msg, Observed: observed}}
}

func TestFatalLogFaultFlipsAndRecoversAfterQuietPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := startExporter(t, newNode(t), clk, "kernel")
	healthy := h.eventually("KernelReady True", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	if cond(healthy, health.ContainerRuntimeReady) != nil {
		t.Fatal("a monitor that is not enabled must not write its condition")
	}

	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, "kubelet: fork/exec /usr/bin/mount: resource temporarily unavailable", clk.Now()))
	sick := h.eventually("KernelReady False", hasStatus(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	ltt := cond(sick, health.KernelReady).LastTransitionTime

	// A new detection with another message changes the message, not the clock.
	clk.Step(time.Minute)
	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, "containerd: runtime: failed to create new OS thread", clk.Now()))
	again := h.eventually("message updated", func(n *corev1.Node) bool {
		c := cond(n, health.KernelReady)
		return c.Message == "containerd: runtime: failed to create new OS thread"
	})
	if got := cond(again, health.KernelReady).LastTransitionTime; !got.Equal(&ltt) {
		t.Fatalf("LastTransitionTime moved from %v to %v on a message change", ltt, got)
	}

	// Warnings are events, never a condition change.
	h.exp.Report(detectionOf(t, health.ReasonSoftLockup, "watchdog: BUG: soft lockup - CPU#3 stuck for 23s!", clk.Now()))

	r, _ := health.LookupReason(health.ReasonForkFailedOutOfPIDs)
	clk.Step(r.QuietPeriod - time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := h.eventually("still False just before the quiet period ends", func(*corev1.Node) bool { return true }); cond(n, health.KernelReady).Status != corev1.ConditionFalse {
		t.Fatal("recovered before the quiet period ended")
	}
	clk.Step(2 * time.Second)
	h.eventually("KernelReady True after quiet period", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
}

func TestCheckFaultRecoversWhenCheckPasses(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := startExporter(t, newNode(t), clk, "containerRuntime")
	reasons := []string{health.ReasonPodStuckTerminating}
	stuck := detectionOf(t, health.ReasonPodStuckTerminating, "pod default/web-0 is 6m past its deletion deadline", clk.Now())
	stuck.Finding.Subject = "default/web-0"
	h.exp.ReportCheck(reasons, []Detection{stuck})
	h.eventually("ContainerRuntimeReady False", hasStatus(health.ContainerRuntimeReady, corev1.ConditionFalse, health.ReasonPodStuckTerminating))
	h.exp.ReportCheck(reasons, nil)
	h.eventually("ContainerRuntimeReady True", hasStatus(health.ContainerRuntimeReady, corev1.ConditionTrue, health.HealthyContainerRuntimeIsReady))
}

func TestRestartKeepsActiveFaultAndTransitionTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	node := newNode(t)
	h := startExporter(t, node, clk, "kernel")
	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, "fork failed", clk.Now()))
	sick := h.eventually("KernelReady False", hasStatus(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	ltt := cond(sick, health.KernelReady).LastTransitionTime
	h.stop()

	clk.Step(10 * time.Minute)
	h2 := startExporter(t, node, clk, "kernel")
	clk.Step(time.Minute) // heartbeat-free period: only the restart's own write
	n := h2.eventually("still False after restart", func(n *corev1.Node) bool {
		c := cond(n, health.KernelReady)
		return c.Status == corev1.ConditionFalse && c.LastHeartbeatTime.After(sick.Status.Conditions[0].LastHeartbeatTime.Time)
	})
	if got := cond(n, health.KernelReady).LastTransitionTime; !got.Equal(&ltt) {
		t.Fatalf("restart moved LastTransitionTime from %v to %v", ltt, got)
	}
	// The adopted fault still recovers: a fresh quiet period from the restart.
	r, _ := health.LookupReason(health.ReasonForkFailedOutOfPIDs)
	clk.Step(r.QuietPeriod)
	h2.eventually("recovered after the quiet period", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
}

func TestDisabledMonitorRemovesItsCondition(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := startExporter(t, newNode(t), clk, "kernel", "containerRuntime")
	h.eventually("both conditions", func(n *corev1.Node) bool {
		return cond(n, health.KernelReady) != nil && cond(n, health.ContainerRuntimeReady) != nil
	})
	m, _ := health.LookupMonitor("kernel")
	h.exp.SetMonitors([]health.Monitor{m})
	h.eventually("ContainerRuntimeReady gone", func(n *corev1.Node) bool {
		return cond(n, health.ContainerRuntimeReady) == nil && cond(n, health.KernelReady) != nil
	})
}

// TestConcurrentKubeletHeartbeatLosesNothing runs a writer that updates the
// kubelet's Ready condition every 10ms while the agent flips KernelReady: at
// the end both sides hold their last value.
func TestConcurrentKubeletHeartbeatLosesNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	node := newNode(t)
	h := startExporter(t, node, clk, "kernel")
	h.eventually("KernelReady True", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var beats atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			i := beats.Add(1)
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"beat %d","lastHeartbeatTime":%q,"lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
				i, time.Now().UTC().Format(time.RFC3339))
			if _, err := client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	r, _ := health.LookupReason(health.ReasonForkFailedOutOfPIDs)
	for i := 0; i < 30; i++ {
		h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, fmt.Sprintf("fault %d", i), clk.Now()))
		h.eventually(fmt.Sprintf("fault %d visible", i), func(n *corev1.Node) bool {
			c := cond(n, health.KernelReady)
			return c != nil && c.Status == corev1.ConditionFalse && c.Message == fmt.Sprintf("fault %d", i)
		})
		clk.Step(r.QuietPeriod)
		h.eventually(fmt.Sprintf("recovery %d visible", i), hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	}
	cancel()
	wg.Wait()
	last := fmt.Sprintf("beat %d", beats.Load())
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := cond(n, "Ready")
	if ready == nil || ready.Message != last {
		t.Fatalf("kubelet's Ready lost its last heartbeat: want %q, got %+v", last, ready)
	}
	if c := cond(n, health.KernelReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("KernelReady lost: %+v", c)
	}
	if beats.Load() < 10 {
		t.Fatalf("heartbeat writer only ran %d times", beats.Load())
	}
}
