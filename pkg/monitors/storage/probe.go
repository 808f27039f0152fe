package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// probeFile is the one file the probe writes, in the agent's own
// directory: a fixed name, so a probe interrupted by a restart leaves
// nothing that accumulates.
const probeFile = ".nodemend-write-probe"

// probePayload is small: the probe tests that the filesystem takes a write
// and a flush to stable storage, not its bandwidth.
var probePayload = []byte("nodemend write probe\n")

// probeState is what the write probe check remembers.
type probeState struct {
	failures int
	since    time.Time
	// ios is the I/O requests the probe directory's block device had
	// completed at the last hung check (iosKnown when it could be read).
	ios      uint64
	iosKnown bool
}

// probeOutcome classifies one probe.
type probeOutcome int

const (
	probeOK probeOutcome = iota
	// probeFault: the filesystem refused (read-only, I/O error) or the
	// write hangs.
	probeFault
	// probeFull: no space or quota left. Not this reason's fault: a full
	// disk is FilesystemNearFull's, and the kubelet's eviction's.
	probeFull
	// probeHung: the write or fsync has not returned. A fault only when
	// the device completes no I/O meanwhile (see evalProbe): a device
	// that does is congested, which any workload that writes enough can
	// cause, not dead.
	probeHung
)

func (m *Monitor) runWriteProbe(ctx context.Context) ([]detection.Finding, error) {
	dir := m.hostPath(m.opts.ProbeDir)
	write := m.writeProbe
	if write == nil {
		write = writeProbe
	}
	_, err := bounded.Run(ctx, &m.probeGuard, "write probe in "+m.opts.ProbeDir, m.opts.ProbeTimeout, func() (struct{}, error) {
		return struct{}{}, write(dir)
	})
	if errors.Is(err, unix.EROFS) {
		if own, merr := agentOnlyReadOnly(selfMountinfo, dir); merr == nil && own {
			return nil, fmt.Errorf("write probe: %s is on a mount that is read-only for the agent only (its superblock is writable): "+
				"mount the host's %s writable into the agent; this says nothing about the host", dir, m.opts.ProbeDir)
		}
	}
	outcome, detail, err := classifyProbe(err, m.opts.ProbeTimeout)
	if err != nil {
		return nil, err
	}
	var dev deviceIOs
	if outcome == probeHung {
		dev.n, dev.ok = m.probeDeviceIOs(ctx)
	}
	thr := m.countThreshold(health.ReasonFilesystemNotWritable)
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.probe, fs = evalProbe(m.probe, outcome, detail, dev, m.opts.ProbeDir, thr, now)
	return fs, nil
}

// deviceIOs is a reading of a block device's completed I/O requests.
type deviceIOs struct {
	n  uint64
	ok bool
}

// probeDeviceTimeout bounds the reads of the mount table and the device's
// statistics while the probe hangs (sysfs and procfs, which do not wait
// on the disk).
const probeDeviceTimeout = time.Second

// probeDeviceIOs reads the I/O requests completed by the block device that
// holds the probe directory (/sys/dev/block/MAJ:MIN/stat: reads, writes and
// flushes completed). ok is false for a filesystem without a block device
// (tmpfs, overlay, NFS) or when it cannot be read.
func (m *Monitor) probeDeviceIOs(ctx context.Context) (uint64, bool) {
	n, err := bounded.Run(ctx, &m.probeDevGuard, "reading the probe device's statistics", probeDeviceTimeout, func() (uint64, error) {
		data, err := os.ReadFile(m.hostPath(mountinfoPath))
		if err != nil {
			return 0, err
		}
		mounts, err := mountinfo.Parse(data)
		if err != nil {
			return 0, err
		}
		i := coveringMount(mounts, filepath.Clean(m.opts.ProbeDir))
		if i < 0 || mounts[i].Major == 0 {
			return 0, errors.New("no block device")
		}
		stat, err := os.ReadFile(m.hostPath(fmt.Sprintf("sys/dev/block/%d:%d/stat", mounts[i].Major, mounts[i].Minor)))
		if err != nil {
			return 0, err
		}
		return parseCompletedIOs(stat)
	})
	return n, err == nil
}

// parseCompletedIOs sums the completed reads (field 1), writes (field 5)
// and, where the kernel has them (4.18+), flushes (field 16) of a block
// device's stat file (Documentation/block/stat.rst).
func parseCompletedIOs(stat []byte) (uint64, error) {
	f := strings.Fields(string(stat))
	if len(f) < 11 {
		return 0, fmt.Errorf("block device stat has %d fields, want at least 11", len(f))
	}
	idx := []int{0, 4}
	if len(f) >= 17 {
		idx = append(idx, 15)
	}
	var sum uint64
	for _, i := range idx {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("block device stat field %d: %w", i+1, err)
		}
		sum += v
	}
	return sum, nil
}

// writeProbe creates dir (0700) if needed, writes a small file in it,
// fsyncs and closes it, and removes it. It writes nowhere else.
func writeProbe(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := filepath.Join(dir, probeFile)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(probePayload); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(p)
}

// selfMountinfo is the agent's own mount table (not the host's).
const selfMountinfo = "/proc/self/mountinfo"

// agentOnlyReadOnly reports whether dir, a path in the agent's own mount
// namespace, is on a mount that is read-only while its filesystem is not: a
// host directory bind-mounted read-only into the agent's container. A write
// refused there (EROFS) is the agent's deployment, not the host's
// filesystem; the host's own read-only remount shows in the superblock.
func agentOnlyReadOnly(table, dir string) (bool, error) {
	data, err := os.ReadFile(table)
	if err != nil {
		return false, err
	}
	ms, err := mountinfo.Parse(data)
	if err != nil {
		return false, err
	}
	i := coveringMount(ms, filepath.Clean(dir))
	if i < 0 {
		return false, nil
	}
	return readOnly(ms[i].MountOptions) && !readOnly(ms[i].SuperOptions), nil
}

// classifyProbe turns the probe's error into an outcome and a detail for
// the message. Errors that say the agent itself is misconfigured (a probe
// directory it may not write, a path that is a file) are returned as the
// check's error: they are not the filesystem's fault.
func classifyProbe(err error, timeout time.Duration) (probeOutcome, string, error) {
	var stuck *bounded.StuckError
	switch {
	case err == nil:
		return probeOK, "", nil
	case errors.As(err, &stuck):
		return probeHung, fmt.Sprintf("the write and fsync have not returned since %s (timeout %v)", stuck.Since.UTC().Format(time.RFC3339), timeout), nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return probeFull, "", nil
	case errors.Is(err, unix.EROFS), errors.Is(err, unix.EIO), errors.Is(err, unix.EUCLEAN), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO), errors.Is(err, unix.ESHUTDOWN):
		return probeFault, errnoText(err), nil
	}
	return probeOK, "", fmt.Errorf("write probe: %w", err)
}

// errnoText is the errno's text ("read-only file system"), which stays the
// same from one probe to the next, unlike the path-laden error.
func errnoText(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// evalProbe reports FilesystemNotWritable after threshold consecutive failed
// probes. The message names when the failures began and the errno, so it
// does not change while the fault lasts.
//
// A hung probe counts as a failure only while the probe directory's device
// completes no I/O: one that completed requests since the last hung check
// is congested — a workload writing enough to the node's disk makes a
// small fsync wait minutes behind its writeback, and recovers when the
// workload goes — so it starts the count over (IODelays reports the
// congestion). A device the probe cannot see (no block device, unreadable
// statistics) counts every hang, as before.
func evalProbe(prev probeState, o probeOutcome, detail string, dev deviceIOs, dir string, threshold int, now time.Time) (probeState, []detection.Finding) {
	switch o {
	case probeFault:
	case probeHung:
		progressed := dev.ok && prev.iosKnown && dev.n != prev.ios
		if progressed {
			return probeState{ios: dev.n, iosKnown: true}, nil
		}
		if dev.ok && prev.iosKnown {
			detail += ", and its device completed no I/O since the last check"
		}
	default:
		return probeState{}, nil
	}
	next := prev
	next.ios, next.iosKnown = dev.n, dev.ok
	if next.failures == 0 {
		next.since = now
	}
	next.failures++
	if next.failures < threshold {
		return next, nil
	}
	return next, []detection.Finding{{
		Reason: health.ReasonFilesystemNotWritable,
		Message: fmt.Sprintf("cannot write and fsync a file in %s since %s (at least %d consecutive probes): %s",
			dir, next.since.UTC().Format(time.RFC3339), threshold, detail),
		Observed: now,
		Subject:  dir,
	}}
}
