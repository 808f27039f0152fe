package diagnostics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
)

// GPUDiagnostics runs a GPU vendor's diagnostic on the node (NVIDIA DCGM's,
// through the agent, which also reports what it found as detections).
type GPUDiagnostics interface {
	// Run runs the diagnostic at level, bounded by timeout. An error wrapping
	// ErrGPUDiagnosticsUnavailable means the node cannot run one (no tool, no
	// host engine, turned off): the request is refused, not failed midway.
	Run(ctx context.Context, level int, timeout time.Duration) (GPUDiagnosticResult, error)
}

// ErrGPUDiagnosticsUnavailable is wrapped by the errors of a node that cannot
// run a GPU diagnostic.
var ErrGPUDiagnosticsUnavailable = errors.New("no GPU diagnostics on this node")

// GPUDiagnosticResult is what a run produced.
type GPUDiagnosticResult struct {
	// Passed is true when no test result failed.
	Passed bool
	// Summary is one line for humans.
	Summary string
	// Failed names the results that did not pass: "memory on GPU 0".
	Failed []string
	// Version and DriverVersion are what the tool reported.
	Version, DriverVersion string
	// RuntimeError is set when the diagnostic could not run its tests.
	RuntimeError string
	// Output is the tool's output as printed (dcgmi's JSON), kept on the node
	// and put into the bundle.
	Output []byte
}

// GPUDiagnosticSuffix ends the name of a GPU diagnostic's output file, which
// lives beside the bundles and is served and expired like them.
const GPUDiagnosticSuffix = "-gpu-diagnostic.json"

// GPUDiagnosticFileName names the output of object name's diagnostic
// started at t.
func GPUDiagnosticFileName(name string, t time.Time) string {
	return strings.TrimSuffix(BundleFileName(name, t), ".tar.gz") + GPUDiagnosticSuffix
}

// runGPUDiagnostic runs the diagnostic of obj, one at a time on the node: a
// second request waits (Pending) for the first, as the host engine runs one
// diagnostic at a time anyway and two would measure each other.
func (r *Runner) runGPUDiagnostic(ctx context.Context, obj *v1alpha1.NodeDiagnostic, a attempt) error {
	spec := obj.Spec.GPUDiagnostic
	level := spec.Level
	if level == 0 {
		level = 1
	}
	timeout := v1alpha1.DefaultGPUDiagnosticTimeout(level)
	if spec.Timeout != nil {
		timeout = spec.Timeout.Duration
	}
	fail := func(reason, msg string) error {
		return r.finishGPU(ctx, a, func(s *v1alpha1.GPUDiagnosticStatus) {
			s.State, s.Message, s.Level = v1alpha1.CaptureFailed, msg, level
		}, reason)
	}
	if r.opts.GPUDiagnostics == nil {
		return fail("GPUDiagnosticsUnavailable", "this agent runs no GPU diagnostics (DCGM is off in its config, monitors.nvidia.dcgm.mode)")
	}

	select {
	case r.gpuSlot <- struct{}{}:
	default:
		if err := r.updateStatus(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
			gs := gpuStatus(s)
			gs.State, gs.Generation, gs.Level = v1alpha1.CapturePending, a.gen, level
			gs.Message = "waiting for another GPU diagnostic on this node to finish"
		}); err != nil {
			return err
		}
		select {
		case r.gpuSlot <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { <-r.gpuSlot }()

	msg := fmt.Sprintf("running DCGM diagnostic level %d (timeout %v)", level, timeout)
	if err := r.start(ctx, a, msg, nil); err != nil {
		return err
	}
	started := r.opts.Clock.Now()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := r.opts.GPUDiagnostics.Run(rctx, int(level), timeout)
	timedOut := rctx.Err() == context.DeadlineExceeded
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The tool's output leaves the node (served beside the bundles, copied
	// into them, summed up in status): it is redacted like a bundle entry.
	res, err = redactGPUResult(redact.New(), res, err)
	var file string
	var size int64
	var expiry *metav1.Time
	if len(res.Output) > 0 {
		name := GPUDiagnosticFileName(obj.Name, started)
		if werr := writeFileAtomic(filepath.Join(r.opts.OutputDir, name), res.Output); werr != nil {
			r.opts.Log.Error(werr, "keeping the GPU diagnostic's output", "name", obj.Name)
		} else {
			file, size = name, int64(len(res.Output))
			t := metav1.NewTime(r.opts.Clock.Now().Add(r.opts.Retention))
			expiry = &t
		}
	}
	record := func(s *v1alpha1.GPUDiagnosticStatus) {
		s.Level, s.FileName, s.SizeBytes, s.ExpiryTime = level, file, size, expiry
		s.DCGMVersion, s.DriverVersion = textcut.Ellipsis(res.Version, 64), textcut.Ellipsis(res.DriverVersion, 64)
	}
	switch {
	case errors.Is(err, ErrGPUDiagnosticsUnavailable):
		return fail("GPUDiagnosticsUnavailable", textcut.Ellipsis(err.Error(), 1024))
	case timedOut:
		return r.finishGPU(ctx, a, func(s *v1alpha1.GPUDiagnosticStatus) {
			record(s)
			s.State, s.Message = v1alpha1.CaptureFailed, fmt.Sprintf("the diagnostic did not finish within %v", timeout)
		}, "Timeout")
	case err != nil:
		return r.finishGPU(ctx, a, func(s *v1alpha1.GPUDiagnosticStatus) {
			record(s)
			s.State, s.Message = v1alpha1.CaptureFailed, textcut.Ellipsis(err.Error(), 1024)
		}, "DiagnosticFailed")
	case res.RuntimeError != "":
		return r.finishGPU(ctx, a, func(s *v1alpha1.GPUDiagnosticStatus) {
			record(s)
			s.State, s.Message = v1alpha1.CaptureFailed, textcut.Ellipsis("the diagnostic did not run: "+res.RuntimeError, 1024)
		}, "DiagnosticNotRun")
	}
	return r.finishGPU(ctx, a, func(s *v1alpha1.GPUDiagnosticStatus) {
		record(s)
		s.State, s.Result = v1alpha1.CaptureCompleted, v1alpha1.GPUDiagnosticPass
		if !res.Passed {
			s.Result = v1alpha1.GPUDiagnosticFail
		}
		for _, f := range res.Failed {
			if len(s.FailedTests) == 64 {
				break
			}
			s.FailedTests = append(s.FailedTests, textcut.Ellipsis(f, 128))
		}
		s.Message = res.Summary
		if file != "" {
			s.Message += fmt.Sprintf("; dcgmi's output on the node until %s at /api/v1/nodes/%s/proxy/logs/nodemend/%s",
				expiry.UTC().Format(time.RFC3339), r.opts.NodeName, file)
		}
		s.Message = textcut.Ellipsis(s.Message, 1024)
	}, "Completed")
}

// redactGPUResult redacts what a GPU diagnostic's result and error carry
// off the node.
func redactGPUResult(red *redact.Redactor, res GPUDiagnosticResult, err error) (GPUDiagnosticResult, error) {
	str := func(s string) string {
		out, _ := red.String(s)
		return out
	}
	if len(res.Output) > 0 {
		res.Output = []byte(str(string(res.Output)))
	}
	res.Summary, res.RuntimeError = str(res.Summary), str(res.RuntimeError)
	res.Version, res.DriverVersion = str(res.Version), str(res.DriverVersion)
	failed := make([]string, len(res.Failed))
	for i, f := range res.Failed {
		failed[i] = str(f)
	}
	res.Failed = failed
	if err != nil {
		err = redactedError{msg: str(err.Error()), err: err}
	}
	return res, err
}

// redactedError is an error whose message is redacted; errors.Is still
// sees what it wraps.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// finishGPU writes the diagnostic's final state: its capture status through
// finish, and the GPU fields.
func (r *Runner) finishGPU(ctx context.Context, a attempt, mutate func(*v1alpha1.GPUDiagnosticStatus), reason string) error {
	return r.finishWith(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
		gs := gpuStatus(s)
		gs.Result, gs.FailedTests = "", nil
		mutate(gs)
	}, reason)
}

func gpuStatus(s *v1alpha1.NodeDiagnosticStatus) *v1alpha1.GPUDiagnosticStatus {
	if s.GPUDiagnostic == nil {
		s.GPUDiagnostic = &v1alpha1.GPUDiagnosticStatus{CaptureStatus: v1alpha1.CaptureStatus{State: v1alpha1.CapturePending}}
	}
	return s.GPUDiagnostic
}

// gpuKey names the GPU diagnostic of one object's generation.
type gpuKey struct {
	name string
	gen  int64
}

// gpuHandover carries a GPU diagnostic's output file to the log capture of
// the same object and generation, which puts it into the bundle. The
// diagnostic hands it over in this process once its final status is
// written, so the log capture waits on it here instead of reading the
// status back from the API server.
type gpuHandover struct {
	done chan struct{}
	file string // set before done is closed
}

// gpuHandoverFor returns the handover of key, making it on first use: either
// side may come first. It stays until the object is deleted or a newer
// generation's is made: a log capture of the same generation that runs
// again (its status write failed) takes the file again, and its object in
// the cache may not yet show the diagnostic's final status.
func (r *Runner) gpuHandoverFor(key gpuKey) *gpuHandover {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.gpuDone[key]
	if h == nil {
		h = &gpuHandover{done: make(chan struct{})}
		r.gpuDone[key] = h
		for k := range r.gpuDone {
			if k.name == key.name && k.gen < key.gen {
				delete(r.gpuDone, k)
			}
		}
	}
	return h
}

// handOverGPU hands the output file of the GPU diagnostic of (name, gen)
// over, once: its final status was written. A diagnostic finished again
// (the same generation's after a restart of its job) changes nothing.
func (r *Runner) handOverGPU(name string, gen int64, file string) {
	h := r.gpuHandoverFor(gpuKey{name, gen})
	select {
	case <-h.done:
	default:
		h.file = file
		close(h.done)
	}
}

// forgetGPU drops the handovers of a deleted object.
func (r *Runner) forgetGPU(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.gpuDone {
		if k.name == name {
			delete(r.gpuDone, k)
		}
	}
}

// gpuOutput waits until the GPU diagnostic of obj's generation is final and
// returns its output file's path ("" when it left none), so that the
// bundle contains it. A diagnostic that finished before this process
// started is final in obj's status already; one of this process hands its
// file over when it writes its final status. A change of generation or the
// object's deletion cancels ctx.
func (r *Runner) gpuOutput(ctx context.Context, obj *v1alpha1.NodeDiagnostic) (string, error) {
	key := gpuKey{obj.Name, obj.Generation}
	file := ""
	if gs := obj.Status.GPUDiagnostic; gs != nil && gs.Generation == key.gen && gs.State.Final() {
		file = gs.FileName
	} else {
		h := r.gpuHandoverFor(key)
		select {
		case <-h.done:
			file = h.file
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if file == "" {
		return "", nil
	}
	return filepath.Join(r.opts.OutputDir, filepath.Base(file)), nil
}

// writeFileAtomic writes data to path (0600) through a partial file, so the
// janitor and the kubelet never see half of it.
func writeFileAtomic(path string, data []byte) error {
	partial := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+partialSuffix)
	if err := os.WriteFile(partial, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(partial, path); err != nil {
		_ = os.Remove(partial)
		return err
	}
	return nil
}
