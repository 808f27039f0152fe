//go:build e2enode

// Package realnode asserts nodemend on a real node: a real kubelet and
// containerd on this machine (internal/realnode, hack/real-node.sh), the
// chart installed from the images `make images` built. Run with
// `make e2e-node` (root; on a shared machine under flock
// /tmp/nodemend-e2e.lock).
//
// One test walks the node's life in order — start, the scenarios, stop
// and its trace check, a second start, bad input — because every scenario
// shares the one node; each step logs the figures it measured.
package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/realnode"
)

// startValues are installed with the chart: the kernel scenario's reason
// recovers 1m (the agent's floor) after its line instead of 45m. The agent replays the last
// 10 minutes of /dev/kmsg when it starts, so a run soon after another sees
// that run's line again: with this quiet period it has long lapsed, and the
// line each run writes is unique to it.
const startValues = `agent:
  config:
    reasons:
      ForkFailedOutOfPIDs: {quietPeriod: 1m}
`

// scenarioValues shorten the agent's check intervals so each scenario
// takes seconds; the first minute runs on the chart's default intervals
// (the idle resource figures are measured there). The journal the agent
// reads is the one testProvenance runs (journalNamespace): the machine has
// no journald of its own.
var scenarioValues = `agent:
  config:
    sources:
      journal: {directory: ` + journalDir() + `}
    monitors:
      kernel: {checkInterval: 5s}
      containerRuntime: {checkInterval: 2s}
      networking: {checkInterval: 2s, probeTimeout: 1s}
controller:
  drainPollInterval: 1s
  recheckInterval: 5s
`

// node is the state the steps share.
type node struct {
	layout realnode.Layout
	client kubernetes.Interface
	before realnode.Trace
	repo   string
	// controllersEvicted: the repair's drain deleted a controller replica.
	controllersEvicted bool
}

func TestRealNode(t *testing.T) {
	repo := testenv.RepoRoot()
	l, err := realnode.DefaultLayout(repo)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{layout: l, repo: repo}
	if lines, _ := l.Status(); strings.Contains(strings.Join(lines, "\n"), "running") {
		t.Fatalf("a node already runs here (hack/real-node.sh status):\n%s", strings.Join(lines, "\n"))
	}
	n.before, err = realnode.TakeTrace(l.Ports)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, running := l.Status(); running {
			_, _ = n.script(context.Background(), "stop")
		}
	})

	steps := []struct {
		name string
		run  func(*testing.T, *node)
	}{
		{"start", testStart},
		{"agent running, four conditions True", testAgentReady},
		{"idle resource use within the chart's requests and limits", testIdleResources},
		{"scenario values reach the agent without a restart", testUpgradeValues},
		{"no lost writes between kubelet and agent", testNoLostWrites},
		{"forged kernel and journal lines move nothing; the kernel's own pids line turns KernelReady False, and it recovers", testProvenance},
		{"containerd stopped and started again", testRuntimeRestart},
		{"kubectl mend logs through the real kubelet", testMendLogs},
		{"a reboot order for a node not under repair is refused; the hook is set up", testRebootHook},
		{"the ladder on the live node: one reboot order, then quarantine", testLadderEscalates},
		{"repair of the live node", testRepair},
		{"stop leaves no trace", testStopLeavesNoTrace},
		{"second start", testSecondStart},
		{"bad input", testBadInput},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, n) }) && s.name == "start" {
			t.Fatal("the node did not start; logs in " + l.LogDir())
		}
	}
}

// script runs hack/real-node.sh and returns its standard output; its
// standard error (progress) goes to the test log.
func (n *node) script(ctx context.Context, args ...string) (string, error) {
	return n.scriptEnv(ctx, nil, args...)
}

func (n *node) scriptEnv(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.repo, "hack", "real-node.sh"), args...)
	cmd.Dir = n.repo
	// make e2e-node built the images and binaries already.
	cmd.Env = append(append(os.Environ(), "NODEMEND_NODE_SKIP_BUILD=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("hack/real-node.sh %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	fmt.Fprint(os.Stderr, errb.String())
	return out.String(), nil
}

func testStart(t *testing.T, n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vf := filepath.Join(t.TempDir(), "start-values.yaml")
	if err := os.WriteFile(vf, []byte(startValues), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out, err := n.script(ctx, "start", "--values", vf)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != n.layout.Admin() {
		t.Fatalf("start printed %q last, want the admin kubeconfig %s", last, n.layout.Admin())
	}
	t.Logf("FIGURE start (node Ready, chart installed, agent and controller running): %.1fs", time.Since(t0).Seconds())
	n.client, err = n.layout.Client()
	if err != nil {
		t.Fatal(err)
	}
}
