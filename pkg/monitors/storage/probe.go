package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitor"
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
)

func (m *Monitor) runWriteProbe(ctx context.Context) ([]monitor.Finding, error) {
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
	thr := m.countThreshold(health.ReasonFilesystemNotWritable)
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []monitor.Finding
	m.probe, fs = evalProbe(m.probe, outcome, detail, m.opts.ProbeDir, thr, now)
	return fs, nil
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
func agentOnlyReadOnly(mountinfo, dir string) (bool, error) {
	data, err := os.ReadFile(mountinfo)
	if err != nil {
		return false, err
	}
	ms, err := parseMountinfo(data)
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
		return probeFault, fmt.Sprintf("the write and fsync have not returned since %s (timeout %v)", stuck.Since.UTC().Format(time.RFC3339), timeout), nil
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
func evalProbe(prev probeState, o probeOutcome, detail, dir string, threshold int, now time.Time) (probeState, []monitor.Finding) {
	if o != probeFault {
		return probeState{}, nil
	}
	next := prev
	if next.failures == 0 {
		next.since = now
	}
	next.failures++
	if next.failures < threshold {
		return next, nil
	}
	return next, []monitor.Finding{{
		Reason: health.ReasonFilesystemNotWritable,
		Message: fmt.Sprintf("cannot write and fsync a file in %s since %s (at least %d consecutive probes): %s",
			dir, next.since.UTC().Format(time.RFC3339), threshold, detail),
		Observed: now,
		Subject:  dir,
	}}
}
