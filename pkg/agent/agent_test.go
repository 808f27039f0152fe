package agent

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
	"nodemend.dev/nodemend/pkg/monitors/kernel"
)

var (
	// client is the tests' own clientset; agentClient the agents' client.
	client      kubernetes.Interface
	agentClient *coreclient.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(env *testenv.Env) error {
		client = env.Client
		var err error
		agentClient, err = coreclient.New(env.Config)
		return err
	})
}

// syncedClock is a Timex reader for a host whose clock is synchronized.
type syncedClock struct{}

func (syncedClock) ReadTimex() (kernel.Timex, error) { return kernel.Timex{MaxErrorMicros: 1000}, nil }

type running struct {
	t       *testing.T
	node    string
	root    *hostroot.Root
	metrics *metrics.Agent
	cancel  context.CancelFunc
	done    chan error
}

var seq atomic.Int32

// fileJournal points the journal reader at the host root's fixture file.
const fileJournal = "sources:\n  journal:\n    mode: file\n    file: /" + hostroot.JournalFixture + "\n"

// startAgent runs an agent for a new node over root with the given config
// text (written to a file so reload can be tested).
func startAgent(t *testing.T, root *hostroot.Root, cfg string) *running {
	t.Helper()
	return startAgentWith(t, root, cfg, corev1.NodeSpec{}, nil)
}

// startAgentWith is startAgent for a Node with spec, with mut changing the
// agent's options.
func startAgentWith(t *testing.T, root *hostroot.Root, cfg string, spec corev1.NodeSpec, mut func(*Options)) *running {
	t.Helper()
	node := fmt.Sprintf("agent-node-%d", seq.Add(1))
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Real hosts have /dev/kmsg and a journal before the agent starts.
	root.AppendKmsg()
	root.AppendJournal()
	cfgPath := root.Path("etc/nodemend/agent.yaml")
	root.WriteFile("etc/nodemend/agent.yaml", cfg)
	m := metrics.NewAgent()
	opts := Options{
		Client: agentClient, NodeName: node, HostRoot: root.Path(""), ConfigPath: cfgPath,
		ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}}, Metrics: m,
	}
	if mut != nil {
		mut(&opts)
	}
	a, err := New(opts)
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

func (r *running) waitNode(what string, cond func(*corev1.Node) bool) *corev1.Node {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(context.Background(), r.node, metav1.GetOptions{})
		if err != nil {
			r.t.Fatal(err)
		}
		if cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; conditions %+v", what, n.Status.Conditions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *running) waitEvent(reason string) *corev1.Event {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		evs, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", r.node), fields.OneTermEqualSelector("reason", reason)).String(),
		})
		if err != nil {
			r.t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			return &evs.Items[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for event %s on %s", reason, r.node)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func condition(n *corev1.Node, t health.ConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == string(t) {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func is(t health.ConditionType, s corev1.ConditionStatus, reason string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := condition(n, t)
		return c != nil && c.Status == s && c.Reason == reason
	}
}

func kmsgRec(seq int, msg string) string {
	return hostroot.KmsgRecord(3, uint64(seq), uint64(seq)*1000, msg)
}

func TestKmsgFatalLineFlipsKernelReady(t *testing.T) {
	root := hostroot.New(t).WithProc()
	root.AppendKmsg(kmsgRec(1, "old record before the agent started: cgroup: fork rejected by pids controller in /system.slice/kubelet.service"))
	r := startAgent(t, root, fileJournal)
	r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))

	// A pod at its own pids limit is the workload's problem.
	root.AppendKmsg(kmsgRec(2, "cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice"))
	// Warnings are events; the condition stays True.
	root.AppendKmsg(kmsgRec(3, "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]"))
	ev := r.waitEvent(health.ReasonSoftLockup)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "CPU#3") {
		t.Fatalf("unexpected SoftLockup event %+v", ev)
	}
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.KernelReady).Status != corev1.ConditionTrue {
		t.Fatalf("a Warning or a pod's own pids limit changed KernelReady: %+v", condition(n, health.KernelReady))
	}
	// The same warning again is aggregated into the same Event (count), not a new one.
	root.AppendKmsg(kmsgRec(3, "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [java:4242]"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ev := r.waitEvent(health.ReasonSoftLockup)
		if ev.Count == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("repeated SoftLockup not aggregated: %+v", ev)
		}
	}

	root.AppendKmsg(kmsgRec(4, "cgroup: fork rejected by pids controller in /system.slice/containerd.service"))
	n := r.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	if msg := condition(n, health.KernelReady).Message; strings.Contains(msg, "old record") {
		t.Fatalf("a record from before the agent started was replayed from a regular file: %q", msg)
	}
	r.waitEvent(health.ReasonForkFailedOutOfPIDs)
}

func TestJournalLinesRaiseRuntimeEvents(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAgent(t, root, fileJournal)
	r.waitNode("ContainerRuntimeReady True", is(health.ContainerRuntimeReady, corev1.ConditionTrue, health.HealthyContainerRuntimeIsReady))
	// systemd (PID 1) about the kubelet's unit.
	root.AppendJournal(map[string]string{
		"MESSAGE": "kubelet.service: Failed with result 'exit-code'.", "UNIT": "kubelet.service", "_SYSTEMD_UNIT": "init.scope",
		"_PID": "1", "_UID": "0", "_COMM": "systemd", "_TRANSPORT": "journal", "SYSLOG_IDENTIFIER": "systemd",
		"__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().UnixMicro()),
	})
	r.waitEvent(health.ReasonKubeletFailed)
	// ForkFailedOutOfPIDs from the kubelet's own journal is Fatal.
	root.AppendJournal(map[string]string{
		"MESSAGE":       `E1202 10:00:00.000000 1234 kubelet.go:1234] "Failed to start" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`,
		"_SYSTEMD_UNIT": "kubelet.service", "_PID": "1234", "_UID": "0", "_COMM": "kubelet", "_TRANSPORT": "stdout",
		"SYSLOG_IDENTIFIER": "kubelet", "__REALTIME_TIMESTAMP": fmt.Sprint(time.Now().UnixMicro()),
	})
	r.waitNode("KernelReady False from the journal", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
}

// TestForgedLinesMoveNoCondition: lines in the words of Fatal rules that
// writers other than the rules' can produce — a user-space write to
// /dev/kmsg (as kmsg, and as the journal's record of it), an SSH user's
// `logger -t kubelet`, a pod's `logger --journald` naming kubelet.service
// in UNIT and systemd in SYSLOG_IDENTIFIER — change no condition and are
// counted as rejected; the kernel's own line then turns KernelReady False.
func TestForgedLinesMoveNoCondition(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAgent(t, root, fileJournal)
	r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	now := func() string { return fmt.Sprint(time.Now().UnixMicro()) }
	pids := "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"
	// echo MSG > /dev/kmsg: the kernel records it as LOG_USER (12 = 1<<3|4).
	root.AppendKmsg(hostroot.KmsgRecord(12, 10, 10000, pids))
	root.AppendJournal(
		map[string]string{"MESSAGE": pids, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "1", "SYSLOG_IDENTIFIER": "kernel",
			"PRIORITY": "4", "__REALTIME_TIMESTAMP": now()},
		map[string]string{"MESSAGE": `E1202 10:00:00.000000 1234 kubelet.go:1234] "Failed" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`,
			"_TRANSPORT": "syslog", "SYSLOG_IDENTIFIER": "kubelet", "SYSLOG_FACILITY": "1", "_PID": "4242", "_UID": "1000",
			"_COMM": "logger", "_SYSTEMD_UNIT": "session-3.scope", "__REALTIME_TIMESTAMP": now()},
		map[string]string{"MESSAGE": "kubelet.service: Failed to fork: Resource temporarily unavailable",
			"_TRANSPORT": "journal", "SYSLOG_IDENTIFIER": "systemd", "UNIT": "kubelet.service", "_PID": "90210", "_UID": "65534",
			"_COMM": "logger", "_SYSTEMD_CGROUP": "/kubepods/besteffort/pod0d3c2e5a/6f1d2c", "__REALTIME_TIMESTAMP": now()},
	)
	// Three match a Fatal rule's text and are rejected (the journal's
	// record of the kmsg write meets no rule: kernel rules read kmsg); the
	// journal reader reads in order, so the first entry is behind us too.
	for deadline := time.Now().Add(15 * time.Second); counter(t, r.metrics, "nodemend_agent_log_lines_rejected_total") < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v forged lines counted as rejected, want 3", counter(t, r.metrics, "nodemend_agent_log_lines_rejected_total"))
		}
	}
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.KernelReady).Status != corev1.ConditionTrue {
		t.Fatalf("a forged line changed KernelReady: %+v", condition(n, health.KernelReady))
	}
	if c := counter(t, r.metrics, "nodemend_agent_detections_total"); c != 0 {
		t.Fatalf("%v detections from forged lines", c)
	}
	root.AppendKmsg(kmsgRec(11, pids))
	r.waitNode("KernelReady False from the kernel's own line", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
}

// TestBadInputKeepsAgentRunning feeds records that must not break the
// agent, then a real fault that must still be seen.
func TestBadInputKeepsAgentRunning(t *testing.T) {
	root := hostroot.New(t) // no /proc at all: every check fails to read
	r := startAgent(t, root, fileJournal+"monitors:\n  kernel:\n    checkInterval: 1s\n")
	r.waitNode("KernelReady True", is(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
	root.AppendKmsg(
		kmsgRec(1, strings.Repeat("x", 1<<20)),
		kmsgRec(2, "invalid utf-8 \xff\xfe here: segfault at"),
		"6,3,", // truncated record
		"garbage without any structure",
	)
	root.AppendJournal(map[string]string{"MESSAGE": "\xff\xfe"}) // no timestamp, bad UTF-8
	root.WriteFile(hostroot.JournalFixture+".tmp", "")
	root.AppendKmsg(kmsgRec(5, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"))
	n := r.waitNode("KernelReady False after bad input", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	for _, c := range n.Status.Conditions {
		if c.Status == corev1.ConditionUnknown {
			t.Fatalf("condition %s is Unknown: could-not-read must never be written as Unknown", c.Type)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); counter(t, r.metrics, "nodemend_agent_check_errors_total") == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("checks without /proc must count errors")
		}
	}
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.KernelReady).Status != corev1.ConditionFalse {
		t.Fatal("a check that cannot read its input must keep the previous state")
	}
}

func TestConfigReloadAndRejection(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAgent(t, root, fileJournal)
	r.waitNode("both conditions", func(n *corev1.Node) bool {
		return condition(n, health.KernelReady) != nil && condition(n, health.ContainerRuntimeReady) != nil
	})
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+"monitors:\n  containerRuntime:\n    enabled: false\n")
	r.waitNode("ContainerRuntimeReady removed", func(n *corev1.Node) bool {
		return condition(n, health.ContainerRuntimeReady) == nil && condition(n, health.KernelReady) != nil
	})
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+"monitors:\n  containerRuntime:\n    enabled: true\n    colour: red\n")
	ev := r.waitEvent("InvalidAgentConfig")
	if !strings.Contains(ev.Message, "colour") {
		t.Fatalf("the event should name the problem: %q", ev.Message)
	}
	time.Sleep(300 * time.Millisecond)
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.ContainerRuntimeReady) != nil {
		t.Fatal("an invalid config was applied")
	}
	// The last good config still works.
	root.AppendKmsg(kmsgRec(1, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"))
	r.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
}

func TestInvalidConfigAtStartFails(t *testing.T) {
	root := hostroot.New(t)
	root.WriteFile("agent.yaml", "monitors: {kernel: {enabled: maybe}}\n")
	a, err := New(Options{Client: agentClient, NodeName: "never", HostRoot: root.Path(""), ConfigPath: root.Path("agent.yaml"), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "invalid agent config") {
		t.Fatalf("want a clear config error at start, got %v", err)
	}
}

func counter(t *testing.T, m *metrics.Agent, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, metric := range mf.GetMetric() {
			total += counterValue(metric)
		}
	}
	return total
}

func counterValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return 0
}

// TestNoConfigFileRunsDefaults: without --config the built-in defaults apply
// (every monitor on) and no file is watched.
func TestNoConfigFileRunsDefaults(t *testing.T) {
	root := hostroot.New(t).WithProc()
	root.AppendKmsg()
	node := fmt.Sprintf("agent-node-%d", seq.Add(1))
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Client: agentClient, NodeName: node, HostRoot: root.Path(""), Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r := &running{t: t, node: node}
	r.waitNode("default monitors publish", func(n *corev1.Node) bool {
		return condition(n, health.KernelReady) != nil && condition(n, health.ContainerRuntimeReady) != nil
	})
}

// TestUntrustedHostToolIsAnEvent: a host tool the agent will not run as
// root (here journalctl configured in world-writable /var/tmp, of this
// machine: the agent's own filesystem) is an UntrustedHostTool Warning on
// the Node naming what is wrong, and nothing runs.
func TestUntrustedHostToolIsAnEvent(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAgent(t, root, "sources:\n  journal:\n    mode: journalctl\n    command: /var/tmp/nodemend-test-journalctl\n")
	ev := r.waitEvent(ReasonUntrustedHostTool)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "/var/tmp") || !strings.Contains(ev.Message, "writable by group or others") {
		t.Fatalf("event %+v", ev)
	}
}
