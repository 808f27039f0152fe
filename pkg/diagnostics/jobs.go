package diagnostics

import (
	"context"
	"fmt"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// The runner's jobs: one per capture an object asks for (its log capture,
// packet capture, GPU diagnostic), started, kept or cancelled by sync as the
// object changes.

type jobKey struct {
	name string
	kind captureKind
}

type captureKind string

const (
	kindLogs    captureKind = "logs"
	kindPackets captureKind = "packets"
	kindGPU     captureKind = "gpu"
)

type job struct {
	gen    int64
	cancel context.CancelFunc
	done   chan struct{}
}

// sync starts, keeps or cancels the captures of one object.
func (r *Runner) sync(ctx context.Context, name string) error {
	item, exists, err := r.loop.Store().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		r.cancelAll(name)
		return nil
	}
	obj := item.(*v1alpha1.NodeDiagnostic)
	if obj.Spec.NodeName != r.opts.NodeName || obj.DeletionTimestamp != nil {
		r.cancelAll(name)
		return nil
	}
	if obj.Spec.LogCapture != nil {
		if err := r.ensure(ctx, obj, kindLogs, obj.Status.LogCapture); err != nil {
			return err
		}
	} else {
		r.cancel(name, kindLogs, 0)
	}
	if obj.Spec.PacketCapture != nil {
		if err := r.ensure(ctx, obj, kindPackets, obj.Status.PacketCapture); err != nil {
			return err
		}
	} else {
		r.cancel(name, kindPackets, 0)
	}
	if obj.Spec.GPUDiagnostic != nil {
		var st *v1alpha1.CaptureStatus
		if obj.Status.GPUDiagnostic != nil {
			st = &obj.Status.GPUDiagnostic.CaptureStatus
		}
		if err := r.ensure(ctx, obj, kindGPU, st); err != nil {
			return err
		}
	} else {
		r.cancel(name, kindGPU, 0)
	}
	return nil
}

func (r *Runner) cancelAll(name string) {
	for _, k := range []captureKind{kindLogs, kindPackets, kindGPU} {
		r.cancel(name, k, 0)
	}
	r.forgetGPU(name)
}

// cancel stops the job of (name, kind) unless it runs generation keep.
func (r *Runner) cancel(name string, kind captureKind, keep int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := jobKey{name, kind}
	if j, ok := r.jobs[k]; ok && (keep == 0 || j.gen != keep) {
		j.cancel()
		delete(r.jobs, k)
	}
}

// ensure decides whether a capture must start.
func (r *Runner) ensure(ctx context.Context, obj *v1alpha1.NodeDiagnostic, kind captureKind, st *v1alpha1.CaptureStatus) error {
	gen := obj.Generation
	r.cancel(obj.Name, kind, gen) // a job for an older generation: the spec changed
	r.mu.Lock()
	_, running := r.jobs[jobKey{obj.Name, kind}]
	r.mu.Unlock()
	if running {
		return nil
	}
	a := attempt{name: obj.Name, gen: gen, kind: kind, number: 1}
	if st != nil && st.Generation == gen {
		if st.State.Final() {
			return nil // done: never again for this generation
		}
		if st.State == v1alpha1.CaptureRunning {
			// This process has no job for it: an agent restart cut it.
			if st.Attempts >= r.opts.MaxAttempts {
				return r.finish(ctx, a, func(cs *v1alpha1.CaptureStatus) {
					cs.State = v1alpha1.CaptureFailed
					cs.Message = fmt.Sprintf("the agent restarted during each of %d attempts; not trying again", st.Attempts)
				}, "AgentRestarted")
			}
			a.number = st.Attempts + 1
		}
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &job{gen: gen, cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	r.jobs[jobKey{obj.Name, kind}] = j
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(j.done)
		defer func() {
			r.mu.Lock()
			if r.jobs[jobKey{obj.Name, kind}] == j {
				delete(r.jobs, jobKey{obj.Name, kind})
			}
			r.mu.Unlock()
			cancel()
		}()
		var err error
		switch kind {
		case kindLogs:
			err = r.runLogCapture(jctx, obj.DeepCopy(), a)
		case kindPackets:
			err = r.runPacketCapture(jctx, obj.DeepCopy(), a)
		case kindGPU:
			err = r.runGPUDiagnostic(jctx, obj.DeepCopy(), a)
		}
		if err != nil && jctx.Err() == nil {
			r.opts.Log.Error(err, "capture failed", "name", obj.Name, "kind", kind)
		}
	}()
	return nil
}
