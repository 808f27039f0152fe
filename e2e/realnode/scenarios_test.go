//go:build e2enode

package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"nodemend.dev/nodemend/realnode"
)

func testAgentReady(t *testing.T, n *node) {
	ctx := context.Background()
	pod := n.agentPod(ctx, t)
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("agent pod %s is not running: %+v", pod.Name, pod.Status)
	}
	started := pod.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	var lastTrue time.Time
	var each []string
	for _, ct := range nodemendConditions {
		c, _ := n.waitCondition(ctx, t, ct, 2*time.Minute, isStatus(corev1.ConditionTrue))
		if c.LastTransitionTime.After(lastTrue) {
			lastTrue = c.LastTransitionTime.Time
		}
		each = append(each, fmt.Sprintf("%s %s", ct, c.LastTransitionTime.Sub(started)))
	}
	// Both times have whole seconds (the kubelet's and the agent's).
	latency := lastTrue.Sub(started)
	t.Logf("FIGURE agent container started → four conditions True: %s (second resolution; %s)", latency, strings.Join(each, ", "))
	if latency > 30*time.Second {
		logs, _ := n.client.CoreV1().Pods(realnode.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		t.Errorf("the conditions took %s after the agent started; want ≤ 30s (%s); the agent's log:\n%s",
			latency, strings.Join(each, ", "), lastLines(string(logs), 60))
	}
	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(nd, "AcceleratedHardwareReady"); c != nil {
		t.Errorf("a CPU node carries AcceleratedHardwareReady: %+v", c)
	}
}

// testIdleResources measures the agent's and the controllers' use over an
// idle minute from their containers' cgroups (cgroup v1): CPU from
// cpuacct.usage, working set as usage − total_inactive_file sampled every
// second (the kubelet's definition), OOM kills from memory.oom_control.
func testIdleResources(t *testing.T, n *node) {
	ctx := context.Background()
	time.Sleep(10 * time.Second) // past the start's first checks and syncs
	type target struct {
		name              string
		cpu, mem          string
		requestCPU, limit resource.Quantity
		restarts          int32
	}
	var targets []target
	add := func(selector, container string) {
		for _, p := range n.pods(ctx, t, realnode.Namespace, selector) {
			var c corev1.Container
			for _, x := range p.Spec.Containers {
				if x.Name == container {
					c = x
				}
			}
			tg := target{name: p.Name, cpu: n.containerCgroup(t, "cpuacct", p, container), mem: n.containerCgroup(t, "memory", p, container),
				requestCPU: c.Resources.Requests[corev1.ResourceCPU], limit: c.Resources.Limits[corev1.ResourceMemory]}
			for _, cs := range p.Status.ContainerStatuses {
				tg.restarts += cs.RestartCount
			}
			targets = append(targets, tg)
		}
	}
	add("app.kubernetes.io/name=nodemend-agent", "agent")
	add("app.kubernetes.io/name=nodemend-controller", "controller")
	if len(targets) != 3 {
		t.Fatalf("want the agent and two controllers, have %d containers", len(targets))
	}
	cpu0 := make([]int64, len(targets))
	peak := make([]int64, len(targets))
	for i, tg := range targets {
		cpu0[i] = readInt(t, filepath.Join(tg.cpu, "cpuacct.usage"))
	}
	t0 := time.Now()
	for time.Since(t0) < time.Minute {
		for i, tg := range targets {
			ws := readInt(t, filepath.Join(tg.mem, "memory.usage_in_bytes")) - statField(t, filepath.Join(tg.mem, "memory.stat"), "total_inactive_file")
			if ws > peak[i] {
				peak[i] = ws
			}
		}
		time.Sleep(time.Second)
	}
	elapsed := time.Since(t0)
	for i, tg := range targets {
		cores := float64(readInt(t, filepath.Join(tg.cpu, "cpuacct.usage"))-cpu0[i]) / float64(elapsed.Nanoseconds())
		oom := statField(t, filepath.Join(tg.mem, "memory.oom_control"), "oom_kill")
		t.Logf("FIGURE idle minute %s: CPU %.2fm (request %s), peak working set %s (limit %s), max usage %s, OOM kills %d, restarts %d",
			tg.name, cores*1000, tg.requestCPU.String(), mib(peak[i]), tg.limit.String(),
			mib(readInt(t, filepath.Join(tg.mem, "memory.max_usage_in_bytes"))), oom, tg.restarts)
		if req := tg.requestCPU.AsApproximateFloat64(); cores > req {
			t.Errorf("%s used %.2fm CPU on average over an idle minute, above its request %s", tg.name, cores*1000, tg.requestCPU.String())
		}
		if peak[i] > tg.limit.Value() {
			t.Errorf("%s peaked at %s working set, above its limit %s", tg.name, mib(peak[i]), tg.limit.String())
		}
		if oom != 0 || tg.restarts != 0 {
			t.Errorf("%s: %d OOM kills, %d restarts; want none", tg.name, oom, tg.restarts)
		}
	}
}

// testUpgradeValues applies the scenarios' values with helm upgrade: the
// agent reloads its ConfigMap (docs/install.md says within seconds, no pod
// restart).
func testUpgradeValues(t *testing.T, n *node) {
	ctx := context.Background()
	before := n.agentPod(ctx, t)
	vf := filepath.Join(t.TempDir(), "scenario-values.yaml")
	if err := os.WriteFile(vf, []byte(scenarioValues), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := n.helm(t)
	t0 := time.Now()
	if out, err := n.layout.Helm(ctx, helm, "upgrade", realnode.Release, filepath.Join(n.repo, "deploy", "helm", "nodemend"),
		"--namespace", realnode.Namespace, "--reuse-values", "--values", vf, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm upgrade: %v: %s", err, out)
	}
	// The agent reports a config reload in its log.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		logs, err := n.client.CoreV1().Pods(realnode.Namespace).GetLogs(before.Name, &corev1.PodLogOptions{SinceTime: &metav1.Time{Time: t0.Add(-time.Second)}}).DoRaw(ctx)
		if err == nil && strings.Contains(string(logs), "agent config applied") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not apply the new config in 2m; its log since the upgrade:\n%s", logs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("FIGURE helm upgrade → agent applied the new config: %.1fs", time.Since(t0).Seconds())
	after := n.agentPod(ctx, t)
	if after.Name != before.Name || after.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("the agent pod was replaced or restarted by a config change")
	}
}

func (n *node) helm(t *testing.T) string {
	t.Helper()
	out, err := execOut(filepath.Join(n.repo, "hack", "helm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// testLink is the fault the test owns: a veth pair with an address, which
// the agent's networking monitor watches like any configured interface.
const testLink = "nmnodet0"

func createTestLink(t *testing.T) netlink.Link {
	t.Helper()
	if old, err := netlink.LinkByName(testLink); err == nil {
		_ = netlink.LinkDel(old)
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: testLink}, PeerName: testLink + "p"}); err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(testLink)
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := netlink.LinkByName(testLink + "p")
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 238, 1, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []netlink.Link{link, peer} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return link
}

func deleteTestLink() {
	if l, err := netlink.LinkByName(testLink); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// snapshot is one node object as a watch saw it.
type snapshot struct {
	rv    string
	conds map[corev1.NodeConditionType]corev1.NodeCondition
}

// testNoLostWrites: for two minutes the kubelet writes its status every
// 10s (nodeStatusReportFrequency) while the agent's NetworkingReady flips
// with a link the test sets down and up. Every node object a watch sees
// must carry all eight conditions, and neither side may ever take the
// other's back: a kubelet write leaves nodemend's conditions as they were,
// an agent write leaves the kubelet's, and every flip the agent made is
// seen.
func testNoLostWrites(t *testing.T, n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	link := createTestLink(t)
	t.Cleanup(deleteTestLink)
	n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionTrue))
	time.Sleep(5 * time.Second) // the agent has seen the link up (a link never seen up is not expected up)

	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, nd.ResourceVersion, &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + n.layout.NodeName
		return n.client.CoreV1().Nodes().Watch(ctx, o)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The Node the watch starts from is the first snapshot: the first
	// event may already be a flip (the agent wrote before the kubelet), and
	// a flip is judged against the object before it.
	seen := []snapshot{snapshotOf(nd)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if nd, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified {
				seen = append(seen, snapshotOf(nd))
			}
		}
	}()

	t0 := time.Now()
	flips := 0
	var downLatencies, upLatencies []time.Duration
	for time.Since(t0) < 2*time.Minute {
		start := time.Now()
		if err := netlink.LinkSetDown(link); err != nil {
			t.Fatal(err)
		}
		// InterfaceNotUp for the link, and InterfaceNotRunning for its
		// peer, which loses its carrier with it: either names the pair.
		n.waitCondition(ctx, t, "NetworkingReady", time.Minute, func(c *corev1.NodeCondition) bool {
			return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, testLink)
		})
		downLatencies = append(downLatencies, time.Since(start))
		start = time.Now()
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionTrue))
		upLatencies = append(upLatencies, time.Since(start))
		flips += 2
	}
	time.Sleep(12 * time.Second) // one more kubelet report after the last flip
	w.Stop()
	<-done

	kubeletWrites, agentWrites, falseSeen := 0, 0, 0
	for i, s := range seen {
		for _, ct := range append(append([]corev1.NodeConditionType{}, kubeletConditions...), nodemendConditions...) {
			if _, ok := s.conds[ct]; !ok {
				t.Errorf("watch event rv %s lacks condition %s", s.rv, ct)
			}
		}
		if i > 0 && s.conds["NetworkingReady"].Status == corev1.ConditionFalse && seen[i-1].conds["NetworkingReady"].Status == corev1.ConditionTrue {
			falseSeen++
		}
		if i == 0 {
			continue
		}
		prev := seen[i-1]
		kubeletMoved := changed(prev, s, kubeletConditions)
		agentMoved := changed(prev, s, nodemendConditions)
		if kubeletMoved {
			kubeletWrites++
		}
		if agentMoved {
			agentWrites++
		}
		// A side's heartbeat or transition time never goes back: that
		// would be the other side writing a stale copy of it.
		for _, ct := range append(append([]corev1.NodeConditionType{}, kubeletConditions...), nodemendConditions...) {
			a, b := prev.conds[ct], s.conds[ct]
			if b.LastHeartbeatTime.Before(&a.LastHeartbeatTime) || b.LastTransitionTime.Before(&a.LastTransitionTime) {
				t.Errorf("rv %s: %s went back in time (heartbeat %s → %s, transition %s → %s): a write clobbered it",
					s.rv, ct, a.LastHeartbeatTime, b.LastHeartbeatTime, a.LastTransitionTime, b.LastTransitionTime)
			}
		}
	}
	sort.Slice(downLatencies, func(i, j int) bool { return downLatencies[i] < downLatencies[j] })
	sort.Slice(upLatencies, func(i, j int) bool { return upLatencies[i] < upLatencies[j] })
	t.Logf("FIGURE no-lost-writes: %d watch events over %s, %d kubelet writes, %d agent writes, %d flips made, %d down-flips seen; link down → False %s–%s, up → True %s–%s",
		len(seen), time.Since(t0).Round(time.Second), kubeletWrites, agentWrites, flips, falseSeen,
		downLatencies[0].Round(time.Millisecond), downLatencies[len(downLatencies)-1].Round(time.Millisecond),
		upLatencies[0].Round(time.Millisecond), upLatencies[len(upLatencies)-1].Round(time.Millisecond))
	if kubeletWrites < 10 {
		t.Errorf("only %d kubelet status writes seen in over two minutes; want ≥ 10 (every 10s)", kubeletWrites)
	}
	if falseSeen != flips/2 {
		t.Errorf("the watch saw %d of the agent's %d down-flips", falseSeen, flips/2)
	}
}

// changed reports whether any of the conditions moved between snapshots.
func snapshotOf(nd *corev1.Node) snapshot {
	s := snapshot{rv: nd.ResourceVersion, conds: map[corev1.NodeConditionType]corev1.NodeCondition{}}
	for _, c := range nd.Status.Conditions {
		s.conds[c.Type] = c
	}
	return s
}

func changed(a, b snapshot, types []corev1.NodeConditionType) bool {
	for _, ct := range types {
		x, y := a.conds[ct], b.conds[ct]
		if x.Status != y.Status || x.Reason != y.Reason || !x.LastHeartbeatTime.Equal(&y.LastHeartbeatTime) || x.Message != y.Message {
			return true
		}
	}
	return false
}

// testRuntimeRestart stops the containerd the script started: the agent
// reports the runtime unresponsive within its threshold (3 checks of 2s,
// each call bounded by 2s), its own container keeps running (the shim
// holds it), and the condition recovers once containerd is back.
func testRuntimeRestart(t *testing.T, n *node) {
	ctx := context.Background()
	n.waitCondition(ctx, t, "ContainerRuntimeReady", time.Minute, isStatus(corev1.ConditionTrue))
	before := n.agentPod(ctx, t)
	agentPID := agentProcess(t)
	pid := n.layout.Daemon("containerd")
	if pid == 0 {
		t.Fatal("containerd is not running")
	}
	t0 := time.Now()
	n.layout.StopDaemon("containerd", 20*time.Second)
	t.Cleanup(func() {
		if n.layout.Daemon("containerd") == 0 {
			_ = n.layout.StartContainerd(context.Background())
		}
	})
	c, at := n.waitCondition(ctx, t, "ContainerRuntimeReady", time.Minute, func(c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "ContainerRuntimeUnresponsive"
	})
	detect := at.Sub(t0)
	t.Logf("FIGURE containerd (pid %d) stopped → ContainerRuntimeReady=False (%s): %s; message: %s", pid, c.Reason, detect.Round(time.Millisecond), c.Message)
	if bound := 3*2*time.Second + 2*time.Second + 10*time.Second; detect > bound {
		t.Errorf("detection took %s; want ≤ %s (threshold 3 checks × 2s + the 2s call timeout + scheduling slack)", detect, bound)
	}
	t1 := time.Now()
	if err := n.layout.StartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	_, back := n.waitCondition(ctx, t, "ContainerRuntimeReady", time.Minute, isStatus(corev1.ConditionTrue))
	t.Logf("FIGURE containerd started again → ContainerRuntimeReady=True: %s", back.Sub(t1).Round(time.Millisecond))
	if p := agentProcess(t); p != agentPID {
		t.Errorf("the agent's process changed across the runtime restart (pid %d → %d)", agentPID, p)
	}
	after := n.agentPod(ctx, t)
	if after.UID != before.UID || after.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("the agent pod was replaced or its container restarted")
	}
}

// agentProcess is the PID of the running nodemend-agent.
func agentProcess(t *testing.T) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmd), "/usr/local/bin/nodemend-agent\x00") {
			var pid int
			fmt.Sscanf(e.Name(), "%d", &pid)
			return pid
		}
	}
	t.Fatal("no nodemend-agent process")
	return 0
}
