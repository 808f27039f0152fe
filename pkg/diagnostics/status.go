package diagnostics

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/textcut"
)

// attempt is one run of one capture of one generation of a NodeDiagnostic:
// what every status write of that capture names. ensure makes it when it
// starts a job; the job hands it to each status writer.
type attempt struct {
	name string      // the NodeDiagnostic
	gen  int64       // the generation the capture serves; a newer one makes the write stale
	kind captureKind // which capture's status and condition
	// number counts the attempts at this generation's capture (1, more
	// after agent restarts cut earlier ones); start records it.
	number int32
}

// errStale: the object changed generation or was deleted; the job's result
// no longer belongs in its status.
var errStale = errors.New("the NodeDiagnostic changed or was deleted")

// updateStatus applies mutate to the latest object of a's generation and
// writes its status, retrying on conflicts (client-go's RetryOnConflict:
// a fresh read after 10 ms, 50 ms, 250 ms, with jitter).
func (r *Runner) updateStatus(ctx context.Context, a attempt, mutate func(*v1alpha1.NodeDiagnosticStatus)) error {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		obj, err := r.nd.Get(ctx, a.name)
		if apierrors.IsNotFound(err) {
			return errStale
		}
		if err != nil {
			return err
		}
		if obj.Generation != a.gen {
			return errStale
		}
		mutate(&obj.Status)
		obj.Status.ObservedGeneration = a.gen
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "AgentAccepted", ObservedGeneration: a.gen,
			Message: "the nodemend-agent on " + r.opts.NodeName + " is serving this object",
		})
		_, err = r.nd.UpdateStatus(ctx, obj)
		return err
	})
}

// Retries of a capture's start and final status writes: 500 ms doubling
// to 30 s, with jitter (internal/backoff). The result of a finished capture
// must not be lost to an API outage (a capture left Running would run
// again), nor must the retries add to the load of an API server that is
// struggling.
const (
	StatusRetryInitial = 500 * time.Millisecond
	StatusRetryMax     = 30 * time.Second
)

// persistStatus is updateStatus retried until it succeeds, the object is
// stale, or ctx ends (the agent stops: the status stays as it was and the
// next agent resumes).
func (r *Runner) persistStatus(ctx context.Context, a attempt, mutate func(*v1alpha1.NodeDiagnosticStatus)) error {
	b := backoff.New(StatusRetryInitial, StatusRetryMax)
	for {
		err := r.updateStatus(ctx, a, mutate)
		if err == nil || errors.Is(err, errStale) || ctx.Err() != nil {
			return err
		}
		r.opts.Log.Error(err, "writing NodeDiagnostic status; will retry", "name", a.name)
		if !b.Wait(ctx, r.opts.Clock) {
			return err
		}
	}
}

// finish writes a capture's final state and its condition.
func (r *Runner) finish(ctx context.Context, a attempt, mutate func(*v1alpha1.CaptureStatus), reason string) error {
	return r.finishWith(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) { mutate(captureStatus(s, a.kind)) }, reason)
}

// finishWith is finish for a mutation of the whole status (the GPU
// diagnostic's result lives beside its capture status).
func (r *Runner) finishWith(ctx context.Context, a attempt, mutate func(*v1alpha1.NodeDiagnosticStatus), reason string) error {
	var gpuFile string // the GPU diagnostic's output as written in its final status
	err := r.persistStatus(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
		cs := captureStatus(s, a.kind)
		cs.Generation = a.gen
		mutate(s)
		if cs.CompletionTime == nil {
			now := metav1.NewTime(r.opts.Clock.Now())
			cs.CompletionTime = &now
		}
		status := metav1.ConditionFalse
		if cs.State == v1alpha1.CaptureCompleted {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: conditionType(a.kind), Status: status, Reason: reason, Message: textcut.Ellipsis(cs.Message, 1024), ObservedGeneration: a.gen,
		})
		if a.kind == kindGPU {
			gpuFile = gpuStatus(s).FileName
		}
	})
	if err == nil && a.kind == kindGPU {
		r.handOverGPU(a.name, a.gen, gpuFile)
	}
	return err
}

func captureStatus(s *v1alpha1.NodeDiagnosticStatus, kind captureKind) *v1alpha1.CaptureStatus {
	if kind == kindGPU {
		return &gpuStatus(s).CaptureStatus
	}
	p := &s.LogCapture
	if kind == kindPackets {
		p = &s.PacketCapture
	}
	if *p == nil {
		*p = &v1alpha1.CaptureStatus{State: v1alpha1.CapturePending}
	}
	return *p
}

func conditionType(kind captureKind) string {
	switch kind {
	case kindPackets:
		return v1alpha1.ConditionPacketsCaptured
	case kindGPU:
		return v1alpha1.ConditionGPUDiagnosed
	}
	return v1alpha1.ConditionLogsCollected
}

// start marks a capture Running (attempt a.number) and its condition in
// progress.
func (r *Runner) start(ctx context.Context, a attempt, msg string, mutate func(*v1alpha1.CaptureStatus)) error {
	return r.persistStatus(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
		now := metav1.NewTime(r.opts.Clock.Now())
		cs := captureStatus(s, a.kind)
		*cs = v1alpha1.CaptureStatus{State: v1alpha1.CaptureRunning, Generation: a.gen, Attempts: a.number, StartTime: &now, Message: msg}
		if a.kind == kindGPU {
			gs := gpuStatus(s)
			gs.Result, gs.FailedTests, gs.DCGMVersion, gs.DriverVersion = "", nil, "", ""
		}
		if mutate != nil {
			mutate(cs)
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: conditionType(a.kind), Status: metav1.ConditionFalse, Reason: "InProgress", Message: msg, ObservedGeneration: a.gen,
		})
	})
}
