// Package diagnostics serves NodeDiagnostics on the agent: it watches the
// objects of its own node only (server-side field selector on the selectable
// field spec.nodeName), runs log captures (redacted .tar.gz bundles kept on
// the node for the kubelet's /logs/ endpoint, or uploaded to an HTTPS URL),
// packet captures (chunks uploaded as they close) and GPU diagnostics (one
// at a time), and reports each capture's progress in status.
//
// All state that matters lives in the object's status, so a restarted agent
// neither runs a finished capture again nor forgets one it was running: a
// capture found Running for the current generation without a job in this
// process was cut by a restart and is started again, up to MaxAttempts.
package diagnostics

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/internal/workloop"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

// Defaults.
const (
	// DefaultRetention is how long a bundle stays on the node.
	DefaultRetention = 10 * time.Minute
	// DefaultMaxBundleBytes caps a bundle's compressed size.
	DefaultMaxBundleBytes = 256 << 20
	// DefaultMaxAttempts bounds restarts of a capture cut by agent restarts:
	// a capture that kills the agent must not do so forever.
	DefaultMaxAttempts = 3
	// OutputSubdir is where bundles go, under the host root.
	OutputSubdir = "var/log/nodemend"
)

// Options configure a Runner.
type Options struct {
	// Config is the agent's REST config, for the NodeDiagnostic client.
	Config *rest.Config
	// Client reads the node and its events for the nodemend category.
	Client   *coreclient.Client
	NodeName string
	HostRoot string
	// OutputDir defaults to <HostRoot>/var/log/nodemend.
	OutputDir string
	// Retention defaults to DefaultRetention.
	Retention time.Duration
	// MaxBundleBytes defaults to DefaultMaxBundleBytes.
	MaxBundleBytes int64
	// CaptureDiskBytes bounds the disk used by packet-capture chunks waiting
	// for upload (default DefaultCaptureDiskBytes).
	CaptureDiskBytes int64
	// LogTailBytes is how much of each log file a bundle keeps (default 32 MiB).
	LogTailBytes int64
	// CollectorTimeout is a collector's default time limit (default 30s).
	CollectorTimeout time.Duration
	// MaxAttempts defaults to DefaultMaxAttempts.
	MaxAttempts int32
	// AllowUploadPrefixes lets uploads reach these otherwise refused
	// (private, loopback, link-local) addresses.
	AllowUploadPrefixes []netip.Prefix
	// Commands defaults to command.Exec.
	Commands command.Runner
	// Netlink defaults to the agent's network namespace.
	Netlink collectors.Netlink
	// Capturer defaults to tcpdump.
	Capturer pcap.Capturer
	// CheckInterface refuses a packet capture's interface that is not a
	// network interface of the agent's network namespace (default); tests
	// replace it.
	CheckInterface func(name string) error
	// DiskFull reports whether the file system of a directory is too full
	// to go on capturing packets into (default: at least 90% used).
	DiskFull func(dir string) (bool, error)
	// Uploader defaults to one built from AllowUploadPrefixes.
	Uploader *upload.Uploader
	// Gatherer and EffectiveConfig feed the nodemend category.
	Gatherer        prometheus.Gatherer
	EffectiveConfig func() any
	// GPUDiagnostics runs GPU diagnostics (NVIDIA DCGM's); nil refuses them.
	GPUDiagnostics GPUDiagnostics
	// CRISocket returns the configured CRI socket (host path) at capture
	// time; nil or empty tries the runtimes' default sockets.
	CRISocket func() string
	// Cloud reads the instance's metadata service for the base category;
	// nil leaves it out.
	Cloud cloudmeta.Provider
	// IPAMDIntrospection and IPAMDMetrics move the VPC CNI's ipamd
	// endpoints (tests); empty means its defaults.
	IPAMDIntrospection, IPAMDMetrics string
	// Collectors overrides the collector set (tests).
	Collectors func(env *collectors.Env, cats []v1alpha1.LogCategory) []collect.Collector
	Clock      clock.WithTicker
	Log        logr.Logger

	// onSync is called after each sync of an object (tests).
	onSync func(name string)
}

// Runner serves the NodeDiagnostics of one node.
type Runner struct {
	opts Options
	nd   *mendclient.Client
	loop *workloop.Loop

	mu   sync.Mutex
	jobs map[jobKey]*job
	wg   sync.WaitGroup
	// statusMu serializes status writes of this process: the log and packet
	// captures of one object write the same status.
	statusMu sync.Mutex
	// gpuSlot admits one GPU diagnostic at a time.
	gpuSlot chan struct{}
	// gpuDone hands each GPU diagnostic's output over to the log capture
	// of the same object and generation (under mu).
	gpuDone map[gpuKey]*gpuHandover
}

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

// New validates opts and builds a Runner.
func New(opts Options) (*Runner, error) {
	if opts.Config == nil || opts.NodeName == "" {
		return nil, errors.New("diagnostics: a REST config and a node name are required")
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.OutputDir == "" {
		opts.OutputDir = filepath.Join(opts.HostRoot, OutputSubdir)
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxBundleBytes <= 0 {
		opts.MaxBundleBytes = DefaultMaxBundleBytes
	}
	if opts.CaptureDiskBytes <= 0 {
		opts.CaptureDiskBytes = DefaultCaptureDiskBytes
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Commands == nil {
		opts.Commands = command.Exec{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Uploader == nil {
		opts.Uploader = &upload.Uploader{Policy: upload.Policy{Allow: opts.AllowUploadPrefixes}}
	}
	if opts.Capturer == nil {
		opts.Capturer = &pcap.Tcpdump{Commands: opts.Commands}
	}
	if opts.CheckInterface == nil {
		opts.CheckInterface = checkInterface
	}
	if opts.DiskFull == nil {
		opts.DiskFull = diskFull
	}
	if opts.Collectors == nil {
		opts.Collectors = collectors.For
	}
	nd, err := mendclient.New(opts.Config)
	if err != nil {
		return nil, err
	}
	r := &Runner{opts: opts, nd: nd, jobs: map[jobKey]*job{}, gpuSlot: make(chan struct{}, 1), gpuDone: map[gpuKey]*gpuHandover{}}
	r.loop = workloop.New(workloop.Config{
		Name: "NodeDiagnostic", ListWatch: nd.ListWatchForNode(opts.NodeName), Object: &v1alpha1.NodeDiagnostic{},
		// A deleted object's key is synced too: its captures are cancelled.
		Deletes:      true,
		RetryInitial: QueueRetryInitial, RetryMax: QueueRetryMax, Sync: r.sync, Synced: opts.onSync, Log: opts.Log,
		Ready: func() {
			opts.Log.Info("serving NodeDiagnostics", "node", opts.NodeName, "outputDir", opts.OutputDir)
		},
	})
	return r, nil
}

// Run serves NodeDiagnostics until ctx ends, then stops running captures
// (their status stays Running, so the next agent resumes them).
func (r *Runner) Run(ctx context.Context) error {
	log := r.opts.Log
	if err := prepareOutputDir(r.opts.OutputDir); err != nil {
		return fmt.Errorf("diagnostics output directory: %w", err)
	}
	// Nothing runs yet: every partial file is a dead process's.
	j := &janitor{dir: r.opts.OutputDir, retention: r.opts.Retention, clock: r.opts.Clock, log: log}
	j.sweep(true)
	go j.run(ctx)

	if r.opts.Netlink == nil {
		if nl, err := collectors.NewNetlink(); err == nil {
			r.opts.Netlink = nl
		} else {
			log.Error(err, "no netlink access; bundles will not have links, addresses and routes")
		}
	}

	if err := r.loop.Run(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	for _, j := range r.jobs {
		j.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
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
	attempts := int32(1)
	if st != nil && st.Generation == gen {
		if st.State.Final() {
			return nil // done: never again for this generation
		}
		if st.State == v1alpha1.CaptureRunning {
			// This process has no job for it: an agent restart cut it.
			if st.Attempts >= r.opts.MaxAttempts {
				return r.finish(ctx, obj.Name, gen, kind, func(cs *v1alpha1.CaptureStatus) {
					cs.State = v1alpha1.CaptureFailed
					cs.Message = fmt.Sprintf("the agent restarted during each of %d attempts; not trying again", st.Attempts)
				}, "AgentRestarted")
			}
			attempts = st.Attempts + 1
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
			err = r.runLogCapture(jctx, obj.DeepCopy(), attempts)
		case kindPackets:
			err = r.runPacketCapture(jctx, obj.DeepCopy(), attempts)
		case kindGPU:
			err = r.runGPUDiagnostic(jctx, obj.DeepCopy(), attempts)
		}
		if err != nil && jctx.Err() == nil {
			r.opts.Log.Error(err, "capture failed", "name", obj.Name, "kind", kind)
		}
	}()
	return nil
}

// errStale: the object changed generation or was deleted; the job's result
// no longer belongs in its status.
var errStale = errors.New("the NodeDiagnostic changed or was deleted")

// updateStatus applies mutate to the latest object of generation gen and
// writes its status, retrying on conflicts (client-go's RetryOnConflict:
// a fresh read after 10 ms, 50 ms, 250 ms, with jitter).
func (r *Runner) updateStatus(ctx context.Context, name string, gen int64, mutate func(*v1alpha1.NodeDiagnosticStatus)) error {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		obj, err := r.nd.Get(ctx, name)
		if apierrors.IsNotFound(err) {
			return errStale
		}
		if err != nil {
			return err
		}
		if obj.Generation != gen {
			return errStale
		}
		mutate(&obj.Status)
		obj.Status.ObservedGeneration = gen
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "AgentAccepted", ObservedGeneration: gen,
			Message: "the nodemend-agent on " + r.opts.NodeName + " is serving this object",
		})
		_, err = r.nd.UpdateStatus(ctx, obj)
		return err
	})
}

// Retries of a NodeDiagnostic whose sync failed: 500 ms doubling to 30 s
// per object, with jitter (internal/backoff.PerItem); client-go's default
// would let an object that failed through an outage wait up to 1000 s
// after it.
const (
	QueueRetryInitial = 500 * time.Millisecond
	QueueRetryMax     = 30 * time.Second
)

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
func (r *Runner) persistStatus(ctx context.Context, name string, gen int64, mutate func(*v1alpha1.NodeDiagnosticStatus)) error {
	b := backoff.New(StatusRetryInitial, StatusRetryMax)
	for {
		err := r.updateStatus(ctx, name, gen, mutate)
		if err == nil || errors.Is(err, errStale) || ctx.Err() != nil {
			return err
		}
		r.opts.Log.Error(err, "writing NodeDiagnostic status; will retry", "name", name)
		if !b.Wait(ctx, r.opts.Clock) {
			return err
		}
	}
}

// finish writes a capture's final state and its condition.
func (r *Runner) finish(ctx context.Context, name string, gen int64, kind captureKind, mutate func(*v1alpha1.CaptureStatus), reason string) error {
	return r.finishWith(ctx, name, gen, kind, func(s *v1alpha1.NodeDiagnosticStatus) { mutate(captureStatus(s, kind)) }, reason)
}

// finishWith is finish for a mutation of the whole status (the GPU
// diagnostic's result lives beside its capture status).
func (r *Runner) finishWith(ctx context.Context, name string, gen int64, kind captureKind, mutate func(*v1alpha1.NodeDiagnosticStatus), reason string) error {
	var gpuFile string // the GPU diagnostic's output as written in its final status
	err := r.persistStatus(ctx, name, gen, func(s *v1alpha1.NodeDiagnosticStatus) {
		cs := captureStatus(s, kind)
		cs.Generation = gen
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
			Type: conditionType(kind), Status: status, Reason: reason, Message: textcut.Ellipsis(cs.Message, 1024), ObservedGeneration: gen,
		})
		if kind == kindGPU {
			gpuFile = gpuStatus(s).FileName
		}
	})
	if err == nil && kind == kindGPU {
		r.handOverGPU(name, gen, gpuFile)
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

// start marks a capture Running (attempt n) and its condition in progress.
func (r *Runner) start(ctx context.Context, name string, gen int64, kind captureKind, attempts int32, msg string, mutate func(*v1alpha1.CaptureStatus)) error {
	return r.persistStatus(ctx, name, gen, func(s *v1alpha1.NodeDiagnosticStatus) {
		now := metav1.NewTime(r.opts.Clock.Now())
		cs := captureStatus(s, kind)
		*cs = v1alpha1.CaptureStatus{State: v1alpha1.CaptureRunning, Generation: gen, Attempts: attempts, StartTime: &now, Message: msg}
		if kind == kindGPU {
			gs := gpuStatus(s)
			gs.Result, gs.FailedTests, gs.DCGMVersion, gs.DriverVersion = "", nil, "", ""
		}
		if mutate != nil {
			mutate(cs)
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: conditionType(kind), Status: metav1.ConditionFalse, Reason: "InProgress", Message: msg, ObservedGeneration: gen,
		})
	})
}
