package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/apigate"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
)

// requestKind names a request the agent sends ("METHOD /path?query", as
// testenv.Outage records it) by what it is for.
func requestKind(req string) string {
	method, target, _ := strings.Cut(req, " ")
	path, query, _ := strings.Cut(target, "?")
	watch := strings.Contains(query, "watch=true")
	listOrWatch := func(what string) string {
		if watch {
			return what + " watch"
		}
		return what + " list"
	}
	switch {
	case strings.Contains(path, "/nodes/") && strings.HasSuffix(path, "/status"):
		return "node status " + method
	case strings.Contains(path, "/nodes/"):
		return "node " + method
	case strings.Contains(path, "/events"):
		return "events " + method
	case strings.HasSuffix(path, "/pods"):
		return listOrWatch("pods")
	case strings.Contains(path, "/nodediagnostics"):
		if strings.HasSuffix(path, "/status") {
			return "NodeDiagnostic status " + method
		}
		if strings.HasSuffix(path, "/nodediagnostics") {
			return listOrWatch("NodeDiagnostics")
		}
		return "NodeDiagnostic " + method
	case strings.Contains(path, "/noderemediations"):
		if strings.HasSuffix(path, "/status") {
			return "NodeRemediation status " + method
		}
		if strings.HasSuffix(path, "/noderemediations") {
			return listOrWatch("NodeRemediations")
		}
		return "NodeRemediation " + method
	}
	return method + " " + path
}

func countKinds(reqs []string) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		out[requestKind(r)]++
	}
	return out
}

func formatKinds(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// TestEveryRequestKindBacksOffThroughAnOutage runs the agent — its
// exporter, event recorder, pod cache, NodeDiagnostic and NodeRemediation
// runners, built by Connect as cmd/nodemend-agent builds them — against
// the real API server behind a proxy that goes down for a minute, in both
// ways an API server goes missing: connections refused, and connections
// accepted then closed after the request (a load balancer without live
// servers). Meanwhile the host keeps changing (a Fatal line and a Warning
// line every second), so every kind has something to send. The agent's
// clock is fake and the minute is walked in 50 ms steps, each waited on
// until no request is out.
//
// Bounds: in the minute of outage the agent sends at most what the gate
// lets out (the requests in flight when the server went, then one probe
// per delay, 0.5 s doubling to 4 s) — at most 30, the goal — and no kind
// more than that; the proxy accepts no more connections than requests.
// When the server is back, the latest state is on the Node within 5 s, and
// an order created during the outage is answered (the NodeRemediation
// watch and status write resumed).
func TestEveryRequestKindBacksOffThroughAnOutage(t *testing.T) {
	env, k8s := outageEnv(t)
	for _, mode := range []testenv.OutageMode{testenv.Refuse, testenv.CloseAfterRequest} {
		t.Run(mode.String(), func(t *testing.T) {
			outageRun(t, env, k8s, mode, false)
		})
	}
}

// outageEnv starts the API server TestEveryRequestKindBacksOffThroughAnOutage
// and its real-time twin use, and a client of nodemend's kinds.
func outageEnv(t *testing.T) (*testenv.Env, crclient.Client) {
	t.Helper()
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(testenv.RepoRoot(), "deploy", "crds")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	return env, must(crclient.New(env.Config, crclient.Options{Scheme: s}))
}

// outageRun is one outage of one mode. On the real clock (realTime) the
// minute is a real minute: client-go's own waits (its reflectors' backoff,
// its retries of a failed GET a second apart) run on the real clock, so
// only a real minute shows what they add (make test-outage-realtime).
func outageRun(t *testing.T, env *testenv.Env, k8s crclient.Client, mode testenv.OutageMode, realTime bool) {
	ctx := context.Background()
	node := "outage-" + strings.ReplaceAll(strings.ReplaceAll(mode.String(), " ", "-"), ",", "")
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	outage, err := testenv.NewOutage(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer outage.Close()
	var clk clock.WithTicker = clock.RealClock{}
	fake := clocktesting.NewFakeClock(time.Now())
	if !realTime {
		clk = fake
	}
	clients, err := Connect(outage.Config(env.Config), clk, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	root := hostroot.New(t).WithProc()
	root.WriteFile(remediate.BootIDPath, "boot-1\n")
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal)
	a, err := New(Options{
		Client: clients.Client, StatusClient: clients.Status, NodeName: node, HostRoot: root.Path(""),
		ConfigPath: root.Path("etc/nodemend/agent.yaml"), ConfigPoll: time.Second, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}},
		Clock:       clk,
		Diagnostics: DiagnosticsOptions{Config: clients.Config},
		Remediation: RemediationOptions{Config: clients.Config},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	// step moves the fake clock and waits until no request the gate let
	// out is still out (the agent reacts in real time to each step).
	step := func(d time.Duration) {
		t.Helper()
		if realTime {
			time.Sleep(d)
			return
		}
		fake.Step(d)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Microsecond) {
			if _, settled := clients.Gate.Settled(); settled {
				time.Sleep(time.Millisecond)
				if _, settled := clients.Gate.Settled(); settled {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("requests still out 20 s after a step")
			}
		}
	}
	nodeCond := func() *corev1.NodeCondition {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return condition(n, health.KernelReady)
	}
	seq, fatals := 0, 0
	kmsg := func(msg string) {
		if strings.Contains(msg, "fork rejected") {
			fatals++
		}
		seq++
		root.AppendKmsg(kmsgRec(seq, msg))
	}

	// Before the outage: every kind of request has been sent at least
	// once (the pod cache starts with the stuck-pod check's first run).
	// The kernel log is read from its end at start: the first line goes
	// in once the agent has written its conditions.
	for countKinds(outage.Requests())["node status PATCH"] == 0 {
		step(100 * time.Millisecond)
	}
	kmsg("watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [kworker/1:1:99]")
	want := []string{"node status PATCH", "events POST", "pods watch", "NodeDiagnostics watch", "NodeRemediations watch"}
	for start := clk.Now(); ; {
		kinds := countKinds(outage.Requests())
		missing := ""
		for _, k := range want {
			if kinds[k] == 0 {
				missing += " " + k
			}
		}
		if missing == "" {
			break
		}
		if clk.Since(start) > 5*time.Minute {
			t.Fatalf("after 5 min (fake) no%s; sent %s", missing, formatKinds(kinds))
		}
		step(time.Second)
	}
	if c := nodeCond(); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("KernelReady before the outage: %+v", c)
	}
	before, acceptedBefore := len(outage.Requests()), outage.Accepted()

	outage.DownAs(mode)
	down := clk.Now()
	for i := 0; clk.Since(down) < time.Minute; i++ {
		if i%20 == 0 { // every second: a new Fatal message and a new Warning
			sec := i / 20
			kmsg(fmt.Sprintf("cgroup: fork rejected by pids controller in /system.slice/outage-%d.service", sec))
			kmsg(fmt.Sprintf("watchdog: BUG: soft lockup - CPU#%d stuck for 23s! [kworker/%d:1:99]", sec%64, sec%64))
		}
		step(50 * time.Millisecond)
	}
	during := outage.Requests()[before:]
	accepted := outage.Accepted() - acceptedBefore
	kinds := countKinds(during)
	probes := backoff.MaxAttempts(apigate.DefaultInitial, apigate.DefaultMax, time.Minute)
	// In flight when the server went: one of each kind at most.
	inFlight := len(want) + 3
	t.Logf("%s: %d requests in a minute of outage (%s); %d connections accepted by the proxy", mode, len(during), formatKinds(kinds), accepted)
	if len(during) > 30 || len(during) > probes+inFlight {
		t.Errorf("%d requests in a minute of outage: more than the goal of 30 or the gate's bound %d", len(during), probes+inFlight)
	}
	for k, n := range kinds {
		if n > probes {
			t.Errorf("%s: %d requests in the minute, more than the gate's %d probes", k, n, probes)
		}
	}
	if len(during) < 8 {
		t.Errorf("only %d requests in a minute of outage: the agent stopped trying", len(during))
	}
	if accepted > len(during)+2 {
		t.Errorf("%d connections accepted for %d requests: connections nobody counted", accepted, len(during))
	}

	// The return: the latest state within 5 s; an order made meanwhile is
	// answered.
	order := &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: node, Action: v1alpha1.HostReboot, BootID: "boot-1", ActiveDeadlineSeconds: 300}}
	if err := k8s.Create(ctx, order); err != nil {
		t.Fatal(err)
	}
	latest := "cgroup: fork rejected by pids controller in /system.slice/at-the-return.service"
	kmsg(latest)
	step(50 * time.Millisecond)
	outage.Up()
	back := clk.Now()
	for {
		c := nodeCond()
		// The message names the first fault and counts the others.
		if c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, fmt.Sprintf("(and %d more active", fatals-1)) {
			break
		}
		if clk.Since(back) > 5*time.Second {
			t.Fatalf("%s: the latest state is not on the Node %v after the API server came back: %+v", mode, clk.Since(back), c)
		}
		step(50 * time.Millisecond)
	}
	t.Logf("%s: the latest state on the Node %v (%s) after the API server came back", mode, clk.Since(back), map[bool]string{true: "real time", false: "fake time"}[realTime])
	realBack := time.Now()
	for {
		if err := k8s.Get(ctx, crclient.ObjectKeyFromObject(order), order); err != nil {
			t.Fatal(err)
		}
		if order.Status.Phase != "" {
			break
		}
		if time.Since(realBack) > time.Minute {
			t.Fatalf("%s: the order made during the outage is not answered a minute after the return", mode)
		}
		step(100 * time.Millisecond)
	}
	t.Logf("%s: the order made during the outage answered %v (%s: %s) after the return (real time: the watch's own backoff is client-go's)",
		mode, time.Since(realBack).Round(time.Millisecond), order.Status.Phase, order.Status.Message)
}
