package diagnostics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
)

// fakeGPU is a GPU diagnostic tool: each run returns result (or err), after
// release is closed when it is set.
type fakeGPU struct {
	mu        sync.Mutex
	result    GPUDiagnosticResult
	err       error
	release   chan struct{}
	running   int
	most      int
	levels    []int
	timeouts  []time.Duration
	untilDone bool // block until the context ends
}

func (f *fakeGPU) Run(ctx context.Context, level int, timeout time.Duration) (GPUDiagnosticResult, error) {
	f.mu.Lock()
	f.running++
	f.most = max(f.most, f.running)
	f.levels, f.timeouts = append(f.levels, level), append(f.timeouts, timeout)
	release, untilDone := f.release, f.untilDone
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	if untilDone {
		<-ctx.Done()
		return GPUDiagnosticResult{Output: []byte(`{"DCGM Diagnostic": {"runtime_error": "killed"}}`)}, ctx.Err()
	}
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return GPUDiagnosticResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.result, f.err
}

func gpuState(s v1alpha1.CaptureState) func(*v1alpha1.NodeDiagnostic) bool {
	return func(o *v1alpha1.NodeDiagnostic) bool {
		g := o.Status.GPUDiagnostic
		return g != nil && g.State == s && g.Generation == o.Generation
	}
}

func gpuOnly(level int32, timeout time.Duration) func(*v1alpha1.NodeDiagnosticSpec) {
	return func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture = nil
		s.GPUDiagnostic = &v1alpha1.GPUDiagnosticSpec{Level: level}
		if timeout > 0 {
			s.GPUDiagnostic.Timeout = &metav1.Duration{Duration: timeout}
		}
	}
}

func condition(o *v1alpha1.NodeDiagnostic, typ string) *metav1.Condition {
	for i := range o.Status.Conditions {
		if o.Status.Conditions[i].Type == typ {
			return &o.Status.Conditions[i]
		}
	}
	return nil
}

var failedRun = GPUDiagnosticResult{
	Passed: false, Summary: "Fail: 1 of 4 test results did not pass (memory on GPU 0)", Failed: []string{"memory on GPU 0"},
	Version: "4.6.0", DriverVersion: "580.95.05", Output: []byte(`{"DCGM Diagnostic": {"test_categories": []}}` + "\n"),
}

func TestGPUDiagnosticResultInStatusAndOnNode(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	// What the tool prints leaves the node: a secret in it is redacted in
	// the file and in status.
	const secret = "Zq8vK2mW9xT4pR7n"
	run := failedRun
	run.Output = []byte(`{"DCGM Diagnostic": {"test_categories": [], "warning": "via https://dcgm:` + secret + `@proxy.internal:3128"}}` + "\n")
	run.Failed = []string{"memory on GPU 0", "token=" + secret}
	gpu := &fakeGPU{result: run}
	startAgent(t, node, h, func(o *Options) { o.GPUDiagnostics = gpu })
	obj := create(t, node, gpuOnly(2, 0))
	done := waitFor(t, obj.Name, "Completed", gpuState(v1alpha1.CaptureCompleted))
	st := done.Status.GPUDiagnostic
	if st.Result != v1alpha1.GPUDiagnosticFail || st.Level != 2 || len(st.FailedTests) != 2 || st.FailedTests[0] != "memory on GPU 0" ||
		st.DCGMVersion != "4.6.0" || st.DriverVersion != "580.95.05" || st.StartTime == nil || st.CompletionTime == nil || st.ExpiryTime == nil {
		t.Fatalf("status %+v", st)
	}
	if !strings.Contains(st.Message, "memory on GPU 0") || !strings.Contains(st.Message, "/proxy/logs/nodemend/"+st.FileName) {
		t.Errorf("message %q", st.Message)
	}
	if gpu.levels[0] != 2 || gpu.timeouts[0] != 30*time.Minute {
		t.Errorf("ran level %v with timeout %v (level 2 defaults to 30m)", gpu.levels, gpu.timeouts)
	}
	path := filepath.Join(h.Root.Dir, OutputSubdir, st.FileName)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != st.SizeBytes || !strings.HasSuffix(st.FileName, GPUDiagnosticSuffix) || !ours(st.FileName) {
		t.Fatalf("output file %s: %v %v", path, fi, err)
	}
	data, err := os.ReadFile(path)
	if err != nil || strings.Contains(string(data), secret) || !strings.Contains(string(data), "https://dcgm:[REDACTED]@proxy.internal") {
		t.Errorf("output file not redacted (%v): %s", err, data)
	}
	if strings.Contains(fmt.Sprint(st), secret) {
		t.Errorf("status carries the secret: %+v", st)
	}
	if c := condition(done, v1alpha1.ConditionGPUDiagnosed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Completed" {
		t.Errorf("GPUDiagnosed %+v", c)
	}
}

func TestGPUDiagnosticRefusedWithoutDCGM(t *testing.T) {
	for name, gpu := range map[string]GPUDiagnostics{
		"no runner": nil,
		"no dcgm":   &fakeGPU{err: fmt.Errorf("%w: dcgmi is not installed", ErrGPUDiagnosticsUnavailable)},
	} {
		t.Run(name, func(t *testing.T) {
			node := newNode(t)
			startAgent(t, node, diagtest.NewHost(t), func(o *Options) { o.GPUDiagnostics = gpu })
			obj := create(t, node, gpuOnly(1, 0))
			done := waitFor(t, obj.Name, "Failed", gpuState(v1alpha1.CaptureFailed))
			c := condition(done, v1alpha1.ConditionGPUDiagnosed)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "GPUDiagnosticsUnavailable" {
				t.Fatalf("GPUDiagnosed %+v", c)
			}
			if st := done.Status.GPUDiagnostic; st.Result != "" || !strings.Contains(st.Message, "DCGM") && !strings.Contains(st.Message, "dcgmi") {
				t.Errorf("status %+v", st)
			}
		})
	}
}

func TestGPUDiagnosticTimesOut(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	gpu := &fakeGPU{untilDone: true}
	startAgent(t, node, h, func(o *Options) { o.GPUDiagnostics = gpu })
	obj := create(t, node, gpuOnly(3, time.Second))
	done := waitFor(t, obj.Name, "Failed", gpuState(v1alpha1.CaptureFailed))
	if c := condition(done, v1alpha1.ConditionGPUDiagnosed); c == nil || c.Reason != "Timeout" || !strings.Contains(c.Message, "within 1s") {
		t.Fatalf("GPUDiagnosed %+v", c)
	}
	if done.Status.GPUDiagnostic.FileName == "" {
		t.Error("what the tool printed before the timeout is not kept")
	}
}

// One diagnostic at a time: a second request waits, Pending, for the first.
func TestGPUDiagnosticsOneAtATime(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	gpu := &fakeGPU{result: GPUDiagnosticResult{Passed: true, Summary: "Pass"}, release: make(chan struct{})}
	startAgent(t, node, h, func(o *Options) { o.GPUDiagnostics = gpu })
	first := create(t, node, gpuOnly(1, 0))
	waitFor(t, first.Name, "first Running", gpuState(v1alpha1.CaptureRunning))
	second := create(t, node, gpuOnly(1, 0))
	waitFor(t, second.Name, "second Pending", func(o *v1alpha1.NodeDiagnostic) bool {
		g := o.Status.GPUDiagnostic
		return g != nil && g.State == v1alpha1.CapturePending && strings.Contains(g.Message, "waiting for another GPU diagnostic")
	})
	close(gpu.release)
	for _, o := range []*v1alpha1.NodeDiagnostic{first, second} {
		if done := waitFor(t, o.Name, "Completed", gpuState(v1alpha1.CaptureCompleted)); done.Status.GPUDiagnostic.Result != v1alpha1.GPUDiagnosticPass {
			t.Errorf("%s: %+v", o.Name, done.Status.GPUDiagnostic)
		}
	}
	if gpu.most != 1 {
		t.Fatalf("%d diagnostics ran at once", gpu.most)
	}
}

// With a log capture in the same object, the bundle waits for the
// diagnostic and carries its output.
func TestGPUDiagnosticInTheBundle(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	gpu := &fakeGPU{result: failedRun, release: make(chan struct{})}
	startAgent(t, node, h, func(o *Options) { o.GPUDiagnostics = gpu })
	obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture.Categories = []v1alpha1.LogCategory{v1alpha1.CategoryAccelerators}
		s.GPUDiagnostic = &v1alpha1.GPUDiagnosticSpec{Level: 1}
	})
	waitFor(t, obj.Name, "logs waiting", func(o *v1alpha1.NodeDiagnostic) bool {
		l := o.Status.LogCapture
		return l != nil && l.State == v1alpha1.CaptureRunning && strings.Contains(l.Message, "waiting for the GPU diagnostic")
	})
	close(gpu.release)
	done := waitFor(t, obj.Name, "bundle", logState(v1alpha1.CaptureCompleted))
	files := readBundle(t, filepath.Join(h.Root.Dir, OutputSubdir, done.Status.LogCapture.FileName))
	if got := files["accelerators/nvidia/dcgm-diagnostic.json"]; got != string(failedRun.Output) {
		t.Fatalf("bundle's diagnostic %q; files %v", got, keys(files))
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestGPUDiagnosticOfAnEarlierAgentInTheBundle: a log capture that an agent
// restart cut while the object's GPU diagnostic had already finished takes
// the diagnostic's output from the object's status (no diagnostic of this
// process hands it over, and none runs again).
func TestGPUDiagnosticOfAnEarlierAgentInTheBundle(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture.Categories = []v1alpha1.LogCategory{v1alpha1.CategoryAccelerators}
		s.GPUDiagnostic = &v1alpha1.GPUDiagnosticSpec{Level: 1}
	})
	file := GPUDiagnosticFileName(obj.Name, time.Now())
	if err := os.MkdirAll(filepath.Join(h.Root.Dir, OutputSubdir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Root.Dir, OutputSubdir, file), failedRun.Output, 0o600); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	obj.Status.GPUDiagnostic = &v1alpha1.GPUDiagnosticStatus{
		CaptureStatus: v1alpha1.CaptureStatus{State: v1alpha1.CaptureCompleted, Generation: obj.Generation, Attempts: 1, StartTime: &now, CompletionTime: &now, FileName: file},
		Level:         1, Result: v1alpha1.GPUDiagnosticFail,
	}
	obj.Status.LogCapture = &v1alpha1.CaptureStatus{State: v1alpha1.CaptureRunning, Generation: obj.Generation, Attempts: 1, StartTime: &now,
		Message: "waiting for the GPU diagnostic of this object to finish"}
	if _, err := nd.UpdateStatus(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	gpu := &fakeGPU{}
	startAgent(t, node, h, func(o *Options) { o.GPUDiagnostics = gpu })
	done := waitFor(t, obj.Name, "bundle", logState(v1alpha1.CaptureCompleted))
	files := readBundle(t, filepath.Join(h.Root.Dir, OutputSubdir, done.Status.LogCapture.FileName))
	if got := files["accelerators/nvidia/dcgm-diagnostic.json"]; got != string(failedRun.Output) {
		t.Fatalf("bundle's diagnostic %q; files %v", got, keys(files))
	}
	gpu.mu.Lock()
	defer gpu.mu.Unlock()
	if len(gpu.levels) != 0 {
		t.Fatalf("a finished diagnostic ran again: levels %v", gpu.levels)
	}
}
