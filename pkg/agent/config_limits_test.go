package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/health"
)

// A config file over 1 MiB stops the agent at start with a clear error.
func TestOversizeConfigAtStartFails(t *testing.T) {
	root := hostroot.New(t)
	root.WriteFile("agent.yaml", "#"+strings.Repeat("x", config.MaxFileBytes)+"\n")
	a, err := New(Options{Client: agentClient, NodeName: "never", HostRoot: root.Path(""), ConfigPath: root.Path("agent.yaml"), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "more than the limit of 1048576 (1 MiB)") {
		t.Fatalf("want a clear size error at start, got %v", err)
	}
}

// A reload to an oversize or hostile file is rejected like any invalid
// config: an event names the problem, the rejection is counted, and the
// last good config stays in force.
func TestOversizeAndHostileConfigReloadsAreRejected(t *testing.T) {
	root := hostroot.New(t).WithProc()
	r := startAgent(t, root, fileJournal+"monitors:\n  containerRuntime:\n    enabled: false\n")
	r.waitNode("KernelReady, no ContainerRuntimeReady", func(n *corev1.Node) bool {
		return condition(n, health.KernelReady) != nil && condition(n, health.ContainerRuntimeReady) == nil
	})
	rejected := counter(t, r.metrics, "nodemend_agent_config_reloads_total")

	// Valid YAML that would turn the runtime monitor on, padded past 1 MiB.
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+"monitors:\n  containerRuntime:\n    enabled: true\n#"+strings.Repeat("x", config.MaxFileBytes)+"\n")
	// The file may be read while the test still writes it: then the read,
	// not the size, finds it too large; both name the limit.
	ev := r.waitEvent("InvalidAgentConfig")
	if !strings.Contains(ev.Message, "too large") || !strings.Contains(ev.Message, "1048576") || !strings.Contains(ev.Message, "keeps its last good config") {
		t.Fatalf("event: %q", ev.Message)
	}
	// A billion laughs next to the same change.
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal+"monitors:\n  containerRuntime:\n    enabled: true\n"+
		"a0: &a0 [lol]\na1: &a1 [*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0]\na2: &a2 [*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1]\n"+
		"a3: &a3 [*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2]\na4: &a4 [*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3]\na5: [*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4]\n")
	for deadline := time.Now().Add(10 * time.Second); counter(t, r.metrics, "nodemend_agent_config_reloads_total") < rejected+2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the two rejections were not counted: %v → %v", rejected, counter(t, r.metrics, "nodemend_agent_config_reloads_total"))
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.ContainerRuntimeReady) != nil {
		t.Fatal("a rejected config was applied")
	}
	// The last good config still works.
	root.AppendKmsg(kmsgRec(1, "cgroup: fork rejected by pids controller in /system.slice/kubelet.service"))
	r.waitNode("KernelReady False", is(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
}
