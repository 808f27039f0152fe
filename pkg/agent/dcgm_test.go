package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/nvidiafake"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
)

// dcgmFixture is one of the dcgmi outputs of pkg/monitors/nvidia/dcgm.
func dcgmFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../monitors/nvidia/dcgm/testdata/health/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// startDCGMAgent runs an agent on an NVIDIA node (two GPUs, fake NVML) whose
// tools are scripted: those of the agent's filesystem and those of the
// host's.
func startDCGMAgent(t *testing.T, cfg string, tools, hostTools command.Runner) *running {
	t.Helper()
	root := hostroot.New(t).WithProc().WithNvidiaGPUs(2)
	node := fmt.Sprintf("dcgm-node-%d", seq.Add(1))
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+cfg)
	m := metrics.NewAgent()
	a, err := New(Options{
		Client: agentClient, NodeName: node, HostRoot: root.Path(""), ConfigPath: root.Path("etc/nodemend/agent.yaml"),
		ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Metrics: m,
		Hosts: monitors.Hosts{Timex: syncedClock{}, NVML: nvidiafake.New(nvidiafake.GPUs(2)...).Opener()}, AppliesPoll: 100 * time.Millisecond, Commands: tools,
		HostCommands: hostTools,
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

const fastDCGM = "monitors:\n  nvidia:\n    dcgm:\n      checkInterval: 1s\n"

func (r *running) dcgmEvents() []corev1.Event {
	r.t.Helper()
	evs, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", r.node).String(),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Reason, "DCGM") {
			out = append(out, e)
		}
	}
	return out
}

// lookups counts the LookPath calls of a runner: how many times the DCGM
// checks looked for dcgmi.
type lookups struct {
	command.Runner
	n atomic.Int64
}

func (l *lookups) LookPath(name string) (string, error) {
	if name == "dcgmi" {
		l.n.Add(1)
	}
	return l.Runner.LookPath(name)
}

// A GPU node without DCGM runs the same agent: the nvidia monitor's
// condition is there, nothing of DCGM is (no event, no detection, the
// condition untouched), and without a host engine dcgmi is asked only to set
// the watches, never for a check.
func TestGPUNodeWithoutDCGM(t *testing.T) {
	noEngine := command.Result{Stdout: "Error: unable to establish a connection to the specified host: localhost\n", Err: errors.New("exit status 235")}
	for name, c := range map[string]struct {
		tools, hostTools *command.Script
		wantCalls        []string
		// lookupsPerCheck: how often a health check looks for the
		// agent's dcgmi (once to find it, once more to run it).
		lookupsPerCheck int64
	}{
		"no dcgmi":                         {command.NewScript(), command.NewScript(), nil, 1},
		"no host engine":                   {command.NewScript().Set("dcgmi *", noEngine), command.NewScript(), []string{"dcgmi health --set a"}, 2},
		"no host engine, the host's dcgmi": {command.NewScript(), command.NewScript().Set("dcgmi *", noEngine), []string{"dcgmi health --set a"}, 2},
	} {
		t.Run(name, func(t *testing.T) {
			agentTools := &lookups{Runner: c.tools}
			r := startDCGMAgent(t, fastDCGM, agentTools, c.hostTools)
			r.waitNode("AcceleratedHardwareReady True", is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))
			// Three health checks started since the condition was
			// written (the field check only runs once a host engine
			// answered), so at least two ran to their end: a check does
			// not start while its previous run is still going.
			start := agentTools.n.Load()
			r.waitNode("three DCGM checks", func(*corev1.Node) bool { return agentTools.n.Load()-start >= 3*c.lookupsPerCheck })
			n := r.waitNode("", func(*corev1.Node) bool { return true })
			if c := condition(n, health.AcceleratedHardwareReady); c.Status != corev1.ConditionTrue || c.Reason != health.HealthyNvidiaGPUIsReady {
				t.Fatalf("condition %+v", c)
			}
			if evs := r.dcgmEvents(); len(evs) != 0 {
				t.Fatalf("DCGM events on a node without DCGM: %+v", evs)
			}
			if got := dcgmDetections(t, r); got != 0 {
				t.Fatalf("%v DCGM detections on a node without DCGM", got)
			}
			for _, calls := range [][]string{c.tools.Calls(), c.hostTools.Calls()} {
				for _, call := range calls {
					if !slices.Contains(c.wantCalls, call) {
						t.Fatalf("ran %q on a node without DCGM", call)
					}
				}
			}
		})
	}
}

// dcgmDetections sums nodemend_agent_detections_total over the DCGM reasons.
func dcgmDetections(t *testing.T, r *running) float64 {
	t.Helper()
	mfs, err := r.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "nodemend_agent_detections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && strings.HasPrefix(l.GetValue(), "DCGM") {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// Where the agent's image has no dcgmi, the host's is used: the checks run
// through the host runner and reach the node the same way.
func TestHostDcgmi(t *testing.T) {
	hostTools := command.NewScript().
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"}).
		Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "memory-fail"), Err: errors.New("exit status 1")}).
		Set("dcgmi dmon --field-id 112 --count 1", command.Result{Stdout: "#Entity   DVCCTR\nID\nGPU 0   0\nGPU 1   0\n"})
	r := startDCGMAgent(t, fastDCGM, command.NewScript(), hostTools)
	n := r.waitNode("AcceleratedHardwareReady False", func(n *corev1.Node) bool {
		c := condition(n, health.AcceleratedHardwareReady)
		return c != nil && c.Status == corev1.ConditionFalse && strings.HasPrefix(c.Reason, "DCGMHealthCode")
	})
	if c := condition(n, health.AcceleratedHardwareReady); !strings.Contains(c.Message, "Memory system") {
		t.Fatalf("condition %+v", c)
	}
}

// With a host engine: a failure DCGM grades Failure turns the condition
// False with the EKS reason, a warning is an Event, recovery clears it, and
// losing the engine is DCGMError.
func TestDCGMHealthReachesTheNode(t *testing.T) {
	tools := command.NewScript().
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"}).
		Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "pass")}).
		Set("dcgmi dmon --field-id 112 --count 1", command.Result{Stdout: "#Entity   DVCCTR\nID\nGPU 0   0\nGPU 1   0\n"})
	r := startDCGMAgent(t, fastDCGM, tools, command.NewScript())
	r.waitNode("AcceleratedHardwareReady True", is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))

	tools.Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "pcie-warn"), Err: errors.New("exit status 1")})
	ev := r.waitEvent("DCGMHealthCode3")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "PCIe replays") {
		t.Fatalf("event %+v", ev)
	}
	if c := condition(r.waitNode("", func(*corev1.Node) bool { return true }), health.AcceleratedHardwareReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("a DCGM warning changed the condition: %+v", c)
	}

	tools.Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "all-fail"), Err: errors.New("exit status 1")})
	n := r.waitNode("AcceleratedHardwareReady False", func(n *corev1.Node) bool {
		c := condition(n, health.AcceleratedHardwareReady)
		return c != nil && c.Status == corev1.ConditionFalse && strings.HasPrefix(c.Reason, "DCGMHealthCode")
	})
	c := condition(n, health.AcceleratedHardwareReady)
	if c.Reason != "DCGMHealthCode120" && c.Reason != "DCGMHealthCode101" && c.Reason != "DCGMHealthCode81" {
		t.Fatalf("reason %s (%s)", c.Reason, c.Message)
	}

	tools.Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "pass")})
	r.waitNode("recovered", is(health.AcceleratedHardwareReady, corev1.ConditionTrue, health.HealthyNvidiaGPUIsReady))

	tools.Set("dcgmi health --check --json", command.Result{Stdout: "Error: unable to establish a connection to the specified host: localhost\n", Err: errors.New("exit status 235")}).
		Set("dcgmi health --set a", command.Result{Stdout: "Error: unable to establish a connection to the specified host: localhost\n", Err: errors.New("exit status 235")})
	n = r.waitNode("DCGMError", is(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonDCGMError))
	if msg := condition(n, health.AcceleratedHardwareReady).Message; !strings.Contains(msg, "answered earlier") {
		t.Fatalf("message %q", msg)
	}
}

// A NodeDiagnostic's GPU diagnostic runs dcgmi diag at the requested level;
// its result is in the object's status, and a failed test is
// DCGMDiagnosticFailure on the node. It has its own API server: the one of
// this package's other tests has no CRDs.
func TestGPUDiagnosticThroughDCGM(t *testing.T) {
	ctx := context.Background()
	diag, err := os.ReadFile("../monitors/nvidia/dcgm/testdata/diag/level2-fail.json")
	if err != nil {
		t.Fatal(err)
	}
	tools := command.NewScript().
		Set("dcgmi health --set a", command.Result{Stdout: "Health monitor systems set successfully.\n"}).
		Set("dcgmi health --check --json", command.Result{Stdout: dcgmFixture(t, "pass")}).
		Set("dcgmi dmon --field-id 112 --count 1", command.Result{Stdout: "#Entity   DVCCTR\nID\nGPU 0   0\nGPU 1   0\n"}).
		Set("dcgmi diag --run 2 --json --timeout 1800", command.Result{Stdout: string(diag), Err: errors.New("exit status 226")})
	node := "gpu-diag-node"
	env, nd := startDiagnosticsAgent(t, node, hostroot.New(t).WithProc().WithNvidiaGPUs(2), fastDCGM, func(o *Options) {
		o.Hosts.NVML, o.Commands = nvidiafake.New(nvidiafake.GPUs(2)...).Opener(), tools
	})
	obj, err := nd.Create(ctx, &v1alpha1.NodeDiagnostic{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: v1alpha1.NodeDiagnosticSpec{NodeName: node, GPUDiagnostic: &v1alpha1.GPUDiagnosticSpec{Level: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var st *v1alpha1.GPUDiagnosticStatus
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := nd.Get(ctx, obj.Name)
		if err != nil {
			t.Fatal(err)
		}
		if st = got.Status.GPUDiagnostic; st != nil && st.State.Final() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result; status %+v", got.Status)
		}
	}
	if st.State != v1alpha1.CaptureCompleted || st.Result != v1alpha1.GPUDiagnosticFail || len(st.FailedTests) != 3 || st.DCGMVersion != "4.6.0" {
		t.Fatalf("status %+v", st)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := condition(n, health.AcceleratedHardwareReady); c != nil && c.Status == corev1.ConditionFalse && c.Reason == health.ReasonDCGMDiagnosticFailure {
			if !strings.Contains(c.Message, "memory") || !strings.Contains(c.Message, "DCGM_FR_MEMORY_MISMATCH") {
				t.Fatalf("message %q", c.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no DCGMDiagnosticFailure; conditions %+v", n.Status.Conditions)
		}
	}
}
