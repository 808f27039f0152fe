package containerruntime

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

var t0 = time.Date(2026, 6, 12, 8, 0, 0, 0, time.UTC)

func TestEvalUnresponsive(t *testing.T) {
	fail := errors.New("Version: rpc error: code = DeadlineExceeded desc = context deadline exceeded")
	tests := []struct {
		name      string
		prev      responsiveness
		err       error
		threshold int
		want      responsiveness
		finding   bool
	}{
		{"success keeps zero", responsiveness{}, nil, 3, responsiveness{}, false},
		{"success resets", responsiveness{Failures: 5, Since: t0}, nil, 3, responsiveness{}, false},
		{"first failure starts the count", responsiveness{}, fail, 3, responsiveness{Failures: 1, Since: t0.Add(time.Minute)}, false},
		{"below threshold", responsiveness{Failures: 1, Since: t0}, fail, 3, responsiveness{Failures: 2, Since: t0}, false},
		{"reaches threshold", responsiveness{Failures: 2, Since: t0}, fail, 3, responsiveness{Failures: 3, Since: t0}, true},
		{"stays over threshold", responsiveness{Failures: 7, Since: t0}, fail, 3, responsiveness{Failures: 8, Since: t0}, true},
		{"threshold 1", responsiveness{}, fail, 1, responsiveness{Failures: 1, Since: t0.Add(time.Minute)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fs := evalUnresponsive(tt.prev, probeResult{At: t0.Add(time.Minute), Err: tt.err}, tt.threshold, "/run/containerd/containerd.sock")
			if got != tt.want {
				t.Errorf("state = %+v, want %+v", got, tt.want)
			}
			if (len(fs) == 1) != tt.finding || len(fs) > 1 {
				t.Fatalf("findings = %+v, want finding=%v", fs, tt.finding)
			}
			if tt.finding {
				f := fs[0]
				if f.Reason != health.ReasonContainerRuntimeUnresponsive || !f.Observed.Equal(t0.Add(time.Minute)) {
					t.Errorf("finding = %+v", f)
				}
				for _, want := range []string{"/run/containerd/containerd.sock", "DeadlineExceeded", tt.want.Since.Format(time.RFC3339)} {
					if !strings.Contains(f.Message, want) {
						t.Errorf("message %q lacks %q", f.Message, want)
					}
				}
			}
		})
	}
}

func TestEvalUnresponsiveMessageStable(t *testing.T) {
	fail := errors.New("Status: unavailable")
	st := responsiveness{}
	var msgs []string
	for i := range 5 {
		var fs []detection.Finding
		st, fs = evalUnresponsive(st, probeResult{At: t0.Add(time.Duration(i) * 30 * time.Second), Err: fail}, 3, "s")
		for _, f := range fs {
			msgs = append(msgs, f.Message)
		}
	}
	if len(msgs) != 3 || msgs[0] != msgs[1] || msgs[1] != msgs[2] {
		t.Errorf("messages while the fault lasts should not change: %q", msgs)
	}
}

type pod = corev1.Pod

func mkPod(ns, name, uid, node string, deletion *time.Time) *pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	if deletion != nil {
		ts := metav1.NewTime(*deletion)
		p.DeletionTimestamp = &ts
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func TestOverduePods(t *testing.T) {
	now := t0
	threshold := 5 * time.Minute
	pods := []*pod{
		mkPod("default", "running", "u1", "node-a", nil),
		mkPod("default", "just-deleted", "u2", "node-a", ptr(now.Add(-time.Minute))),
		mkPod("default", "at-deadline", "u3", "node-a", ptr(now.Add(-threshold))),
		mkPod("default", "overdue", "u4", "node-a", ptr(now.Add(-threshold-time.Second))),
		mkPod("kube-system", "overdue-long", "u5", "node-a", ptr(now.Add(-time.Hour))),
		mkPod("default", "other-node", "u6", "node-b", ptr(now.Add(-time.Hour))),
		mkPod("default", "unbound", "u7", "", ptr(now.Add(-time.Hour))),
		// Grace is already in the deletionTimestamp: a 1h grace period pod
		// deleted now has deletionTimestamp now+1h and is not overdue.
		mkPod("default", "long-grace", "u8", "node-a", ptr(now.Add(time.Hour))),
		nil,
	}
	got := overduePods(now, pods, "node-a", threshold)
	want := []overduePod{
		{Key: "default/overdue", UID: "u4", Deletion: now.Add(-threshold - time.Second), Overdue: threshold + time.Second},
		{Key: "kube-system/overdue-long", UID: "u5", Deletion: now.Add(-time.Hour), Overdue: time.Hour},
	}
	if !slices.Equal(got, want) {
		t.Errorf("overduePods =\n%+v\nwant\n%+v", got, want)
	}

	// Empty node name: every bound pod counts (other-node too), never unbound ones.
	var keys []string
	for _, p := range overduePods(now, pods, "", threshold) {
		keys = append(keys, p.Key)
	}
	if want := []string{"default/other-node", "default/overdue", "kube-system/overdue-long"}; !slices.Equal(keys, want) {
		t.Errorf("without node name: %v, want %v", keys, want)
	}

	// Threshold 0: past the deletionTimestamp itself.
	if got := overduePods(now, pods[:2], "node-a", 0); len(got) != 1 || got[0].Key != "default/just-deleted" {
		t.Errorf("threshold 0: %+v", got)
	}
}

func TestRuntimeUsage(t *testing.T) {
	sandboxes := []*runtimeapi.PodSandbox{
		{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Uid: "u1"}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
		{Id: "sb2", Metadata: &runtimeapi.PodSandboxMetadata{Uid: "u2"}, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		{Id: "sb3", Labels: map[string]string{labelPodUID: "u3"}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}
	containers := []*runtimeapi.Container{
		{Id: "c1", PodSandboxId: "sb1", Metadata: &runtimeapi.ContainerMetadata{Name: "web"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{labelPodUID: "u1"}},
		{Id: "c2", PodSandboxId: "sb1", Metadata: &runtimeapi.ContainerMetadata{Name: "init"}, State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: map[string]string{labelPodUID: "u1"}},
		{Id: "c3", PodSandboxId: "sb1", Metadata: &runtimeapi.ContainerMetadata{Name: "envoy"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{labelPodUID: "u1"}},
		// No UID label: attributed through its (not ready) sandbox.
		{Id: "c4", PodSandboxId: "sb2", Labels: map[string]string{labelContainerName: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		// No UID at all: ignored.
		{Id: "c5", PodSandboxId: "unknown", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}
	got := runtimeUsage(containers, sandboxes)
	want := map[string]podUsage{
		"u1": {Containers: []string{"envoy", "web"}, SandboxReady: true},
		"u2": {Containers: []string{"app"}},
		"u3": {SandboxReady: true},
	}
	if len(got) != len(want) {
		t.Fatalf("usage has %d pods, want %d: %+v", len(got), len(want), got)
	}
	for uid, w := range want {
		g := got[uid]
		if g == nil || !slices.Equal(g.Containers, w.Containers) || g.SandboxReady != w.SandboxReady {
			t.Errorf("usage[%s] = %+v, want %+v", uid, g, w)
		}
	}
}

func TestEvalStuck(t *testing.T) {
	threshold := 5 * time.Minute
	overdue := []overduePod{
		{Key: "default/both", UID: "u1", Deletion: t0.Add(-6 * time.Minute), Overdue: 6*time.Minute + 300*time.Millisecond},
		{Key: "default/containers", UID: "u2", Deletion: t0.Add(-time.Hour), Overdue: time.Hour},
		{Key: "default/sandbox", UID: "u3", Deletion: t0.Add(-time.Hour), Overdue: time.Hour},
		{Key: "default/gone", UID: "u4", Deletion: t0.Add(-time.Hour), Overdue: time.Hour},
		{Key: "default/empty", UID: "u5", Deletion: t0.Add(-time.Hour), Overdue: time.Hour},
	}
	use := map[string]*podUsage{
		"u1": {Containers: []string{"envoy", "web"}, SandboxReady: true},
		"u2": {Containers: []string{"web"}},
		"u3": {SandboxReady: true},
		"u5": {},
	}
	fs := evalStuck(t0, threshold, overdue, use)
	wantMsgs := map[string][]string{
		"default/both":       {"pod default/both", "more than 5m0s past", "[envoy web] and a ready sandbox"},
		"default/containers": {"more than 5m0s past", "running containers [web]"},
		"default/sandbox":    {"still reports a ready sandbox"},
	}
	if len(fs) != len(wantMsgs) {
		t.Fatalf("got %d findings, want %d: %+v", len(fs), len(wantMsgs), fs)
	}
	for _, f := range fs {
		if f.Reason != health.ReasonPodStuckTerminating || !f.Observed.Equal(t0) {
			t.Errorf("finding %+v", f)
		}
		parts, ok := wantMsgs[f.Subject]
		if !ok {
			t.Errorf("unexpected subject %q", f.Subject)
		}
		for _, p := range parts {
			if !strings.Contains(f.Message, p) {
				t.Errorf("%s: message %q lacks %q", f.Subject, f.Message, p)
			}
		}
	}
}

func TestThresholdConversions(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want int
	}{{3, 3}, {2.5, 3}, {0, 1}, {-4, 1}, {math.NaN(), 1}, {1e20, math.MaxInt32}} {
		if got := countThreshold(tt.in); got != tt.want {
			t.Errorf("countThreshold(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		in   float64
		want time.Duration
	}{{300, 5 * time.Minute}, {0.5, 500 * time.Millisecond}, {-1, 0}, {math.NaN(), 0}, {1e30, math.MaxInt64}} {
		if got := secondsThreshold(tt.in); got != tt.want {
			t.Errorf("secondsThreshold(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestRateWindow(t *testing.T) {
	type step struct {
		at    time.Duration // since t0
		count int
		emit  bool
	}
	tests := []struct {
		name      string
		threshold int
		limit     int
		steps     []step
	}{
		{"emits when the count reaches the threshold", 3, 100, []step{
			{0, 1, false}, {time.Second, 2, false}, {2 * time.Second, 3, true}, {3 * time.Second, 4, false},
		}},
		{"old events leave the window", 3, 100, []step{
			{0, 1, false}, {time.Minute, 2, false}, {5 * time.Minute, 2, false}, {6 * time.Minute, 2, false},
			{6*time.Minute + time.Second, 3, true},
		}},
		{"at most once per window while the rate stays high", 2, 100, []step{
			{0, 1, false}, {time.Second, 2, true}, {2 * time.Minute, 3, false}, {4 * time.Minute, 4, false},
			{5*time.Minute + time.Second, 3, true}, {6 * time.Minute, 4, false}, {10*time.Minute + time.Second, 2, true},
		}},
		{"limit bounds memory", 1, 2, []step{
			{0, 1, true}, {time.Second, 2, false}, {2 * time.Second, 2, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w rateWindow
			for i, s := range tt.steps {
				count, emit := w.record(t0.Add(s.at), 5*time.Minute, tt.threshold, tt.limit)
				if count != s.count || emit != s.emit {
					t.Errorf("step %d (%v): count=%d emit=%v, want %d %v", i, s.at, count, emit, s.count, s.emit)
				}
			}
		})
	}
}
