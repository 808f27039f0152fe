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
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
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
		RetryInitial: QueueRetryInitial, RetryMax: QueueRetryMax, Sync: r.sync, Log: opts.Log,
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

// Retries of a NodeDiagnostic whose sync failed: 500 ms doubling to 30 s
// per object, with jitter (internal/backoff.PerItem); client-go's default
// would let an object that failed through an outage wait up to 1000 s
// after it.
const (
	QueueRetryInitial = 500 * time.Millisecond
	QueueRetryMax     = 30 * time.Second
)
