package containerruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/fakecri"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// callTimeout is short to keep hanging-runtime tests fast, long enough for a
// loaded CI machine to answer a healthy call.
const callTimeout = 300 * time.Millisecond

// hostRoot returns a short temporary host root (unix socket paths are limited
// to about 100 bytes, which t.TempDir() can exceed).
func hostRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func startCRI(t *testing.T, root, hostPath string) *fakecri.Server {
	t.Helper()
	srv, err := fakecri.Start(filepath.Join(root, hostPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func newMonitor(t *testing.T, root string, clk *clocktesting.FakeClock, opts Options) *Monitor {
	t.Helper()
	if opts.CallTimeout == 0 {
		opts.CallTimeout = callTimeout
	}
	m := New(detection.Env{HostRoot: root, Clock: clk, Threshold: registryThreshold(nil)}, opts)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func check(t *testing.T, m *Monitor, name string) detection.Check {
	t.Helper()
	for _, c := range m.Checks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q", name)
	return detection.Check{}
}

func run(t *testing.T, c detection.Check) ([]detection.Finding, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Run(ctx)
}

func TestChecks(t *testing.T) {
	// A zero option takes the config's default, the one place it is written.
	def := DefaultConfig()
	m := New(detection.Env{}, Options{})
	if got := m.Checks(); len(got) != 2 || got[0].Name != "cri-responsive" || got[0].Period != def.CheckInterval.Duration ||
		!slices.Equal(got[0].Reasons, []string{health.ReasonContainerRuntimeUnresponsive}) ||
		got[1].Name != "containerd-deprecations" || got[1].Period != def.DeprecationInterval.Duration ||
		!slices.Equal(got[1].Reasons, []string{health.ReasonDeprecatedContainerdConfiguration}) {
		t.Errorf("without a pod lister: %+v", got)
	}
	if m.Name() != "containerRuntime" {
		t.Errorf("Name = %q", m.Name())
	}
	if _, ok := health.LookupMonitor(m.Name()); !ok {
		t.Errorf("%q is not a registry monitor", m.Name())
	}
	m = New(detection.Env{}, Options{Pods: func() ([]*pod, error) { return nil, nil }, StuckPodPeriod: time.Hour})
	if got := m.Checks(); len(got) != 3 || got[2].Name != "pods-stuck-terminating" || got[2].Period != time.Hour ||
		!slices.Equal(got[2].Reasons, []string{health.ReasonPodStuckTerminating}) {
		t.Errorf("with a pod lister: %+v", got)
	}
	if m.cri.path != DefaultSocketPath || m.cri.timeout != def.CRITimeout.Duration {
		t.Errorf("defaults: path %q timeout %v", m.cri.path, m.cri.timeout)
	}
	m = New(detection.Env{HostRoot: "/host"}, Options{SocketPath: "unix:///run/crio/crio.sock"})
	if m.cri.path != "/host/run/crio/crio.sock" || !m.expected {
		t.Errorf("configured socket: path %q expected %v", m.cri.path, m.expected)
	}
}

func TestUnresponsiveHangingRuntime(t *testing.T) {
	root := hostRoot(t)
	srv := startCRI(t, root, DefaultSocketPath)
	clk := clocktesting.NewFakeClock(t0)
	c := check(t, newMonitor(t, root, clk, Options{}), "cri-responsive")

	expectRuns := func(phase string, want ...bool) {
		t.Helper()
		for i, w := range want {
			fs, err := run(t, c)
			if err != nil {
				t.Fatalf("%s run %d: %v", phase, i+1, err)
			}
			if got := len(fs) == 1 && fs[0].Reason == health.ReasonContainerRuntimeUnresponsive; got != w || len(fs) > 1 {
				t.Fatalf("%s run %d: findings %+v, want unresponsive=%v", phase, i+1, fs, w)
			}
			clk.Step(30 * time.Second)
		}
	}

	expectRuns("healthy", false, false)
	if srv.Calls(fakecri.MethodVersion) != 2 || srv.Calls(fakecri.MethodStatus) != 2 || srv.Calls(fakecri.MethodListPodSandbox) != 2 {
		t.Errorf("a healthy check calls Version, Status and ListPodSandbox once each")
	}

	srv.Hang()
	srv.ResetCalls()
	start := time.Now()
	expectRuns("hanging", false, false, true, true)
	if srv.Calls(fakecri.MethodVersion) != 4 || srv.Calls(fakecri.MethodStatus) != 0 {
		t.Errorf("a hung Version should end the check: Version %d Status %d calls",
			srv.Calls(fakecri.MethodVersion), srv.Calls(fakecri.MethodStatus))
	}
	if d := time.Since(start); d > 4*callTimeout+2*time.Second {
		t.Errorf("4 hanging checks took %v: calls are not bounded by the call timeout", d)
	}

	// One success resets the count.
	srv.Heal()
	expectRuns("recovered", false)
	srv.Hang()
	expectRuns("hanging again", false, false, true)
	srv.Heal()
	expectRuns("recovered again", false)

	// A hang on a later call counts the same.
	srv.Hang(fakecri.MethodListPodSandbox)
	expectRuns("ListPodSandbox hangs", false, false, true)
	srv.Heal()
	expectRuns("healed", false)
}

func TestUnresponsiveErrorCodes(t *testing.T) {
	root := hostRoot(t)
	srv := startCRI(t, root, DefaultSocketPath)
	clk := clocktesting.NewFakeClock(t0)
	m := New(detection.Env{HostRoot: root, Clock: clk, Threshold: registryThreshold(map[string]float64{
		health.ReasonContainerRuntimeUnresponsive: 2,
	})}, Options{CallTimeout: callTimeout})
	t.Cleanup(func() { _ = m.Close() })
	c := check(t, m, "cri-responsive")

	srv.Fail(codes.Unavailable, fakecri.MethodStatus)
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("first failure: %+v %v", fs, err)
	}
	fs, err := run(t, c)
	if err != nil || len(fs) != 1 {
		t.Fatalf("second failure with threshold 2: %+v %v", fs, err)
	}
	for _, want := range []string{"Status:", "Unavailable", "threshold 2", DefaultSocketPath} {
		if !strings.Contains(fs[0].Message, want) {
			t.Errorf("message %q lacks %q", fs[0].Message, want)
		}
	}
	if strings.Contains(fs[0].Message, root) {
		t.Errorf("message %q names the agent's host root; it should name the host path", fs[0].Message)
	}
	srv.Heal()
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("healed: %+v %v", fs, err)
	}
}

func TestUnresponsiveDefaultSocket(t *testing.T) {
	root := hostRoot(t)
	clk := clocktesting.NewFakeClock(t0)
	c := check(t, newMonitor(t, root, clk, Options{}), "cri-responsive")

	// Never seen: not expected, so not a fault, whatever the number of checks.
	for range 5 {
		fs, err := run(t, c)
		if !errors.Is(err, errNotExpected) || len(fs) != 0 {
			t.Fatalf("socket never seen: %+v %v", fs, err)
		}
	}

	// Appears: healthy, and expected from now on.
	srv := startCRI(t, root, DefaultSocketPath)
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("runtime up: %+v %v", fs, err)
	}

	// Goes away (runtime stopped, socket removed): failures.
	srv.Stop()
	for i := range 3 {
		fs, err := run(t, c)
		if err != nil || len(fs) != map[bool]int{false: 0, true: 1}[i == 2] {
			t.Fatalf("socket gone, run %d: %+v %v", i+1, fs, err)
		}
		if i == 2 && !strings.Contains(fs[0].Message, "missing") {
			t.Errorf("message %q should say the socket is missing", fs[0].Message)
		}
	}

	// Comes back (a new socket at the same path): recovers on the next check.
	startCRI(t, root, DefaultSocketPath)
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("runtime back: %+v %v", fs, err)
	}
}

func TestUnresponsiveConfiguredSocketMissing(t *testing.T) {
	root := hostRoot(t)
	clk := clocktesting.NewFakeClock(t0)
	c := check(t, newMonitor(t, root, clk, Options{SocketPath: "/run/crio/crio.sock"}), "cri-responsive")
	for i := range 3 {
		fs, err := run(t, c)
		if err != nil || len(fs) != map[bool]int{false: 0, true: 1}[i == 2] {
			t.Fatalf("configured socket missing, run %d: %+v %v", i+1, fs, err)
		}
	}

	// A stale file that is not a listening socket fails the same way.
	path := filepath.Join(root, "run/crio/crio.sock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if fs, err := run(t, c); err != nil || len(fs) != 1 {
		t.Fatalf("stale file: %+v %v", fs, err)
	}
}

type podList struct {
	pods []*pod
	err  error
}

func (l *podList) list() ([]*pod, error) { return l.pods, l.err }

func TestPodStuckTerminating(t *testing.T) {
	root := hostRoot(t)
	srv := startCRI(t, root, DefaultSocketPath)
	clk := clocktesting.NewFakeClock(t0)
	pods := &podList{}
	c := check(t, newMonitor(t, root, clk, Options{NodeName: "node-a", Pods: pods.list}), "pods-stuck-terminating")

	// Running, not deleted.
	srv.RunPod("default", "web-0", "uid-web-0", "web")
	pods.pods = append(pods.pods, mkPod("default", "web-0", "uid-web-0", "node-a", nil))
	// Deleted 4 minutes ago (deletionTimestamp = delete request + grace), still running.
	srv.RunPod("default", "stuck", "uid-stuck", "app", "envoy")
	pods.pods = append(pods.pods, mkPod("default", "stuck", "uid-stuck", "node-a", ptr(t0.Add(-4*time.Minute))))
	// Long overdue, but its containers and sandbox are gone.
	pods.pods = append(pods.pods, mkPod("default", "gone", "uid-gone", "node-a", ptr(t0.Add(-time.Hour))))
	// Long overdue, stopped but not removed: exited containers, sandbox not ready.
	srv.RunPod("default", "stopped", "uid-stopped", "app")
	srv.StopPod("uid-stopped")
	pods.pods = append(pods.pods, mkPod("default", "stopped", "uid-stopped", "node-a", ptr(t0.Add(-time.Hour))))
	// Long overdue and running, but bound to another node (a lister bug).
	srv.RunPod("default", "elsewhere", "uid-elsewhere", "app")
	pods.pods = append(pods.pods, mkPod("default", "elsewhere", "uid-elsewhere", "node-b", ptr(t0.Add(-time.Hour))))

	// Nothing past its deadline that the runtime still runs.
	srv.ResetCalls()
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("before the deadline: %+v %v", fs, err)
	}
	if srv.Calls(fakecri.MethodListContainers) != 1 || srv.Calls(fakecri.MethodListPodSandbox) != 1 {
		t.Errorf("one check: %d ListContainers, %d ListPodSandbox calls, want 1 each",
			srv.Calls(fakecri.MethodListContainers), srv.Calls(fakecri.MethodListPodSandbox))
	}

	// Exactly at deletionTimestamp + 5 min: not yet.
	clk.Step(time.Minute)
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("at the deadline: %+v %v", fs, err)
	}

	// Past it: one finding, for that pod.
	clk.Step(90 * time.Second)
	fs, err := run(t, c)
	if err != nil || len(fs) != 1 {
		t.Fatalf("past the deadline: %+v %v", fs, err)
	}
	f := fs[0]
	if f.Reason != health.ReasonPodStuckTerminating || f.Subject != "default/stuck" || !f.Observed.Equal(clk.Now()) {
		t.Errorf("finding %+v", f)
	}
	for _, want := range []string{"pod default/stuck", "more than 5m0s past its deletion deadline", "[app envoy]"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message %q lacks %q", f.Message, want)
		}
	}

	// The runtime finally kills the containers; the sandbox alone still counts.
	for _, ctr := range srv.Containers() {
		if ctr.Labels[fakecri.LabelPodUID] == "uid-stuck" {
			srv.SetContainerState(ctr.Id, runtimeapi.ContainerState_CONTAINER_EXITED)
		}
	}
	if fs, err := run(t, c); err != nil || len(fs) != 1 || !strings.Contains(fs[0].Message, "a ready sandbox") {
		t.Fatalf("sandbox still ready: %+v %v", fs, err)
	}
	// And removes the pod: recovered.
	srv.RemovePod("uid-stuck")
	if fs, err := run(t, c); err != nil || len(fs) != 0 {
		t.Fatalf("pod removed: %+v %v", fs, err)
	}

	// Several stuck pods: one finding each.
	srv.RunPod("team", "a", "uid-a", "app")
	srv.RunPod("team", "b", "uid-b", "app")
	pods.pods = append(pods.pods,
		mkPod("team", "a", "uid-a", "node-a", ptr(clk.Now().Add(-10*time.Minute))),
		mkPod("team", "b", "uid-b", "node-a", ptr(clk.Now().Add(-10*time.Minute))))
	fs, err = run(t, c)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, f := range fs {
		subjects = append(subjects, f.Subject)
	}
	if !slices.Equal(subjects, []string{"team/a", "team/b"}) {
		t.Errorf("subjects %v", subjects)
	}

	// The runtime hangs: the check cannot read its input.
	srv.Hang(fakecri.MethodListContainers)
	if fs, err := run(t, c); err == nil || len(fs) != 0 {
		t.Errorf("hung runtime: %+v %v", fs, err)
	}
	srv.Heal()

	// The lister fails.
	pods.err = errors.New("cache not synced")
	if _, err := run(t, c); err == nil || !strings.Contains(err.Error(), "cache not synced") {
		t.Errorf("lister error: %v", err)
	}
}

func TestPodStuckTerminatingNoCRICallWhenNothingOverdue(t *testing.T) {
	root := hostRoot(t)
	srv := startCRI(t, root, DefaultSocketPath)
	clk := clocktesting.NewFakeClock(t0)
	pods := &podList{pods: []*pod{
		mkPod("default", "web-0", "uid-web-0", "node-a", nil),
		mkPod("default", "leaving", "uid-leaving", "node-a", ptr(t0.Add(30*time.Second))),
	}}
	c := check(t, newMonitor(t, root, clk, Options{NodeName: "node-a", Pods: pods.list}), "pods-stuck-terminating")
	srv.Hang() // would fail the check if it called the runtime
	for range 3 {
		if fs, err := run(t, c); err != nil || len(fs) != 0 {
			t.Fatalf("%+v %v", fs, err)
		}
	}
	if n := srv.Calls(fakecri.MethodListContainers) + srv.Calls(fakecri.MethodListPodSandbox); n != 0 {
		t.Errorf("%d CRI calls with no overdue pod, want 0", n)
	}
}
