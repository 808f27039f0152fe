package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/nvidiafake"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// startAccelAgent runs an agent like startAgent, with an injected NVML and a
// fast applicability poll.
func startAccelAgent(t *testing.T, root *hostroot.Root, cfg string, nvml nvidia.Opener) *running {
	t.Helper()
	node := fmt.Sprintf("accel-node-%d", seq.Add(1))
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", cfg)
	m := metrics.NewAgent()
	a, err := New(Options{
		Client: agentClient, NodeName: node, HostRoot: root.Path(""), ConfigPath: root.Path("etc/nodemend/agent.yaml"),
		ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}, NVML: nvml}, Metrics: m,
		AppliesPoll: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, node: node, root: root, metrics: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("agent returned %v", err)
		}
	})
	return r
}

// A node without accelerators has no AcceleratedHardwareReady at all — not
// Unknown, not True — although the three accelerator monitors are enabled.
// When a GPU appears (driver loaded after the agent), the condition appears;
// when it is gone again, the condition is removed.
func TestNoAcceleratorNoCondition(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAccelAgent(t, root, fileJournal, nvidiafake.NoDriver)
	n := r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	time.Sleep(300 * time.Millisecond) // several applicability polls
	n = r.waitNode("", func(*corev1.Node) bool { return true })
	if c := condition(n, health.AcceleratedHardwareReady); c != nil {
		t.Fatalf("a node without accelerators must not have AcceleratedHardwareReady: %+v", c)
	}

	root.WithNvidiaGPUs(1)
	r.waitNode("AcceleratedHardwareReady True after /dev/nvidia0 appeared",
		is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))
	root.Remove("dev/nvidia0")
	r.waitNode("AcceleratedHardwareReady removed", func(n *corev1.Node) bool {
		return condition(n, health.AcceleratedHardwareReady) == nil && condition(n, health.KernelReady) != nil
	})
}

// An XID 79 kernel line makes AcceleratedHardwareReady False; a Warning XID
// (13, the application's) is an Event only.
func TestXID79FlipsAcceleratedHardwareReady(t *testing.T) {
	root := hostroot.New(t).WithProc().WithNvidiaGPUs(2)
	drv := nvidiafake.New(nvidiafake.GPUs(2)...)
	r := startAccelAgent(t, root, fileJournal, drv.Opener())
	r.waitNode("AcceleratedHardwareReady True", is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))

	root.AppendKmsg(kmsgRec(10, "NVRM: Xid (PCI:0000:1b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"))
	ev := r.waitEvent(health.ReasonNvidiaXID13Warning)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "XID 13") {
		t.Fatalf("unexpected event %+v", ev)
	}
	if c := condition(r.waitNode("", func(*corev1.Node) bool { return true }), health.AcceleratedHardwareReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("an application XID changed the condition: %+v", c)
	}

	start := time.Now()
	root.AppendKmsg(kmsgRec(11, "NVRM: Xid (PCI:0000:2b:00): 79, pid=1234, name=python, GPU has fallen off the bus."))
	n := r.waitNode("AcceleratedHardwareReady False", is(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonNvidiaXID79Error))
	t.Logf("XID 79 kmsg line → condition False in %v (wall clock, including the test's 20ms poll)", time.Since(start))
	if msg := condition(n, health.AcceleratedHardwareReady).Message; !strings.Contains(msg, "GPU 0000:2b:00") {
		t.Fatalf("the message must name the GPU: %q", msg)
	}
	r.waitEvent(health.ReasonNvidiaXID79Error)
}

// The NVML event path pushes into the exporter without waiting for a check
// period (the checks here run once an hour).
func TestNVMLEventReachesConditionWithoutPolling(t *testing.T) {
	root := hostroot.New(t).WithProc().WithNvidiaGPUs(1)
	drv := nvidiafake.New(nvidiafake.GPUs(1)...)
	r := startAccelAgent(t, root, fileJournal+"monitors:\n  nvidia:\n    checkInterval: 1h\n", drv.Opener())
	r.waitNode("AcceleratedHardwareReady True", is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if watching, _ := drv.Watching(); watching {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not register an NVML event set")
		}
	}
	start := time.Now()
	drv.Emit(nvidia.Event{Device: nvidiafake.GPUs(1)[0], Kind: nvidia.EventXID, XID: 95, Observed: time.Now()})
	r.waitNode("AcceleratedHardwareReady False from an NVML event", is(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonNvidiaXID95Error))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the event took %v: it waited for something", d)
	}
}
