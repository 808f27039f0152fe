// Package storage is the storage monitor: it owns the StorageReady condition.
//
// Periodic checks read the host's mount table (/proc/1/mountinfo) and statfs
// the filesystems the node depends on, write and fsync a tiny file in the
// agent's own probe directory, read I/O pressure (PSI), and read the EBS NVMe
// statistics log page of Amazon EBS volumes. Log rules read kernel messages
// about block I/O errors and filesystem errors and shutdowns, and the
// kubelet's journal about slow disk usage scans.
//
// Every blocking call (statfs on a hung NFS mount, fsync on a wedged disk, an
// NVMe admin ioctl) runs with a timeout and is never started twice while
// stuck: a hung probe is itself a finding, never a hung agent.
package storage

import (
	"math"
	"path/filepath"
	"sync"
	"time"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Name is the registry monitor name.
const Name = "storage"

// DefaultFilesystems are the host paths whose filesystems the node depends
// on: the root, the kubelet's directory and containerd's. A path that does
// not exist on a node (CRI-O's nodes have no /var/lib/containerd) stands for
// the filesystem it would be created on.
func DefaultFilesystems() []string {
	return []string{"/", "/var/lib/kubelet", "/var/lib/containerd"}
}

// Options configure the monitor; Config.Options builds them from the config
// section. A zero period, timeout or directory, and a nil list, take the one
// of DefaultConfig, the only place the defaults are written.
type Options struct {
	// Period is the period of every check.
	Period time.Duration
	// Filesystems are host paths whose filesystems must stay writable and
	// not fill up.
	Filesystems []string
	// ProbeDir is where the write probe writes, a host path the agent owns.
	ProbeDir string
	// ProbeTimeout bounds each blocking call: the write probe, each statfs,
	// each NVMe log page read.
	ProbeTimeout time.Duration
	// LogPages reads NVMe log pages; nil means the NVMe admin ioctl. Tests
	// inject byte fixtures.
	LogPages LogPageReader
	// XFSPeriod is the period of the XFS free space check.
	XFSPeriod time.Duration
	// FreeSpace reads XFS free space summaries; nil means xfs_db (XFSDB).
	FreeSpace FreeSpaceReader
}

// Monitor implements detection.Monitor for StorageReady.
type Monitor struct {
	env  detection.Env
	opts Options

	probeGuard, psiGuard, mountsGuard, spaceGuard, xfsGuard bounded.Guard
	// probeDevGuard reads the probe device's statistics while it hangs.
	probeDevGuard bounded.Guard
	// writeProbe replaces the real probe in tests (a blocking fake).
	writeProbe func(dir string) error

	mu sync.Mutex
	// statfsGuards and ebsGuards are per mount point and per device: one
	// hung NFS mount or NVMe controller blocks only its own probe.
	statfsGuards map[string]*bounded.Guard
	ebsGuards    map[string]*bounded.Guard
	xfsGuards    map[string]*bounded.Guard
	fs           fsState
	// devices maps the kernel names of the block devices behind the
	// configured paths to those paths, for the XFS shutdown rule.
	devices map[string]string
	probe   probeState
	ebs     map[string]ebsStats
}

var _ detection.Monitor = (*Monitor)(nil)

// New builds the storage monitor. It touches nothing until its checks run.
func New(env detection.Env, opts Options) *Monitor {
	env = env.WithDefaults()
	detection.FillDefaults(&opts, DefaultConfig().Options())
	if opts.LogPages == nil {
		opts.LogPages = NVMeAdmin{}
	}
	if opts.FreeSpace == nil {
		opts.FreeSpace = XFSDB{HostRoot: env.HostRoot}
	}
	return &Monitor{
		env:          env,
		opts:         opts,
		statfsGuards: map[string]*bounded.Guard{},
		ebsGuards:    map[string]*bounded.Guard{},
		xfsGuards:    map[string]*bounded.Guard{},
		ebs:          map[string]ebsStats{},
	}
}

// Name implements detection.Monitor.
func (m *Monitor) Name() string { return Name }

// Checks implements detection.Monitor.
func (m *Monitor) Checks() []detection.Check {
	p := m.opts.Period
	return []detection.Check{
		{
			Name:    "storage-mounts",
			Period:  p,
			Reasons: []string{health.ReasonFilesystemReadOnly},
			Run:     m.runMounts,
		},
		{
			Name:    "storage-space",
			Period:  p,
			Reasons: []string{health.ReasonFilesystemNearFull},
			Run:     m.runSpace,
		},
		{
			Name:    "storage-write-probe",
			Period:  p,
			Reasons: []string{health.ReasonFilesystemNotWritable},
			Run:     m.runWriteProbe,
		},
		{
			Name:    "storage-io-pressure",
			Period:  p,
			Reasons: []string{health.ReasonIODelays},
			Run:     m.runIOPressure,
		},
		{
			Name:    "storage-xfs-free-space",
			Period:  m.opts.XFSPeriod,
			Reasons: []string{health.ReasonXFSSmallAverageClusterSize},
			Run:     m.runXFS,
		},
		{
			Name:    "storage-ebs",
			Period:  p,
			Reasons: ebsReasons(),
			Run:     m.runEBS,
		},
	}
}

// hostPath is a host path under the host root.
func (m *Monitor) hostPath(p string) string { return filepath.Join(m.env.HostRoot, p) }

// guard returns the guard of key in guards, creating it.
func (m *Monitor) guard(guards map[string]*bounded.Guard, key string) *bounded.Guard {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := guards[key]
	if g == nil {
		g = &bounded.Guard{}
		guards[key] = g
	}
	return g
}

// countThreshold is a reason's threshold as a count of at least 1.
func (m *Monitor) countThreshold(reason string) int {
	v := m.env.Threshold(reason)
	if math.IsNaN(v) || v < 1 {
		return 1
	}
	return int(math.Min(math.Ceil(v), 1<<30))
}
