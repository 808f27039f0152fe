package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/bytecount"
	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// mountinfoPath is PID 1's mount table: the host's, whatever mount
// namespace the agent itself runs in.
const mountinfoPath = "proc/1/mountinfo"

// fsView is one configured path and the mount that holds it.
type fsView struct {
	Path  string
	Mount mountinfo.Entry
	// Device is the kernel's name of the block device ("nvme0n1p1",
	// "dm-0"), "" for filesystems without one (tmpfs, overlay, NFS).
	Device string
}

// fsState is what the read-only check remembers.
type fsState struct {
	// seenRW are the mount points seen writable: one that becomes
	// read-only later was not meant to be.
	seenRW map[string]bool
}

func (m *Monitor) runMounts(ctx context.Context) ([]detection.Finding, error) {
	views, err := bounded.Run(ctx, &m.mountsGuard, "reading "+mountinfoPath, m.opts.ProbeTimeout, m.readViews)
	if err != nil {
		return nil, err
	}
	devices := map[string]string{}
	for _, v := range views {
		if v.Device != "" && devices[v.Device] == "" {
			devices[v.Device] = v.Path
		}
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices = devices
	var fs []detection.Finding
	m.fs, fs = evalReadOnly(m.fs, views, now)
	return fs, nil
}

// runSpace is its own check so that a statfs that hangs (an NFS server
// gone) fails only the space verdict, never the read-only one.
func (m *Monitor) runSpace(ctx context.Context) ([]detection.Finding, error) {
	thr := m.env.Threshold(health.ReasonFilesystemNearFull)
	if math.IsNaN(thr) || thr <= 0 || thr > 100 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a percentage in (0, 100]", health.ReasonFilesystemNearFull, thr)
	}
	views, err := bounded.Run(ctx, &m.spaceGuard, "reading "+mountinfoPath, m.opts.ProbeTimeout, m.readViews)
	if err != nil {
		return nil, err
	}
	usages, err := m.statViews(ctx, views)
	if err != nil {
		return nil, err
	}
	return evalSpace(usages, thr, m.env.Clock.Now()), nil
}

// readViews reads the mount table and resolves each configured path.
func (m *Monitor) readViews() ([]fsView, error) {
	data, err := os.ReadFile(m.hostPath(mountinfoPath))
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.Parse(data)
	if err != nil {
		return nil, err
	}
	var views []fsView
	for _, p := range m.opts.Filesystems {
		i := coveringMount(mounts, filepath.Clean(p))
		if i < 0 {
			return nil, fmt.Errorf("no mount holds %s in %s", p, mountinfoPath)
		}
		mt := mounts[i]
		views = append(views, fsView{Path: p, Mount: mt, Device: m.deviceName(mt)})
	}
	return views, nil
}

// deviceName is the kernel name of a mount's block device: DEVNAME from
// sysfs (the name kernel messages use, e.g. dm-0 for /dev/mapper/root),
// else the source's base name when it is a /dev path.
func (m *Monitor) deviceName(mt mountinfo.Entry) string {
	if mt.Major == 0 {
		return "" // anonymous device: tmpfs, overlay, NFS, ...
	}
	data, err := os.ReadFile(m.hostPath(fmt.Sprintf("sys/dev/block/%d:%d/uevent", mt.Major, mt.Minor)))
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok && name != "" {
				return name
			}
		}
	}
	if strings.HasPrefix(mt.Source, "/dev/") {
		return filepath.Base(mt.Source)
	}
	return ""
}

// usage is what statfs(2) says of one mount.
type usage struct {
	// Point is the mount point, Paths the configured paths it holds.
	Point, Paths            string
	BlocksPct, InodesPct    float64
	AvailBytes, TotalBytes  uint64
	InodesFree, InodesTotal uint64
	// Pseudo is a filesystem without blocks: nothing to fill.
	Pseudo bool
}

// statViews statfs's each distinct mount once, each call bounded and
// guarded per mount point. Failures are returned together.
func (m *Monitor) statViews(ctx context.Context, views []fsView) ([]usage, error) {
	byPoint := map[string][]string{}
	var points []string
	for _, v := range views {
		if _, ok := byPoint[v.Mount.Point]; !ok {
			points = append(points, v.Mount.Point)
		}
		byPoint[v.Mount.Point] = append(byPoint[v.Mount.Point], v.Path)
	}
	var out []usage
	var errs []error
	for _, p := range points {
		target := m.existing(p)
		st, err := bounded.Run(ctx, m.guard(m.statfsGuards, p), "statfs "+p, m.opts.ProbeTimeout, func() (unix.Statfs_t, error) {
			var st unix.Statfs_t
			err := unix.Statfs(target, &st)
			return st, err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("statfs %s: %w", p, err))
			continue
		}
		u := usageOf(st)
		u.Point, u.Paths = p, strings.Join(byPoint[p], ", ")
		out = append(out, u)
	}
	return out, errors.Join(errs...)
}

// existing is the host path of p under the host root, or its nearest
// existing parent there (a fake root, or a path not created yet).
func (m *Monitor) existing(p string) string {
	for q := filepath.Clean(p); ; q = filepath.Dir(q) {
		hp := m.hostPath(q)
		if _, err := os.Stat(hp); err == nil || !errors.Is(err, fs.ErrNotExist) || q == "/" {
			return hp
		}
	}
}

// usageOf computes used space as df does: used / (used + available to
// unprivileged users), so the root-reserved blocks count as full.
func usageOf(st unix.Statfs_t) usage {
	bsize := uint64(st.Bsize)
	used := st.Blocks - st.Bfree
	u := usage{
		AvailBytes:  st.Bavail * bsize,
		TotalBytes:  st.Blocks * bsize,
		InodesFree:  st.Ffree,
		InodesTotal: st.Files,
	}
	if st.Blocks == 0 {
		u.Pseudo = true
		return u
	}
	if d := used + st.Bavail; d > 0 {
		u.BlocksPct = float64(used) * 100 / float64(d)
	}
	if st.Files > 0 && st.Ffree <= st.Files {
		u.InodesPct = float64(st.Files-st.Ffree) * 100 / float64(st.Files)
	}
	return u
}

// --- pure evaluation ---------------------------------------------------------

// evalReadOnly reports FilesystemReadOnly for each configured path whose
// filesystem is read-only at the superblock, when that is a fault:
//   - the mount itself is read-write: the kernel remounted the filesystem
//     read-only after an error (ext4 errors=remount-ro), the mount never
//     asked for it;
//   - or the mount was seen writable earlier and was remounted read-only.
//
// A filesystem mounted read-only from the start (an immutable root such as
// Bottlerocket's) is how the node was built, not a fault.
func evalReadOnly(prev fsState, views []fsView, now time.Time) (fsState, []detection.Finding) {
	next := fsState{seenRW: map[string]bool{}}
	for p := range prev.seenRW {
		next.seenRW[p] = true
	}
	var fs []detection.Finding
	reported := map[string]bool{}
	for _, v := range views {
		mt := v.Mount
		superRO, mountRO := readOnly(mt.SuperOptions), readOnly(mt.MountOptions)
		if !superRO && !mountRO {
			next.seenRW[mt.Point] = true
			continue
		}
		var why string
		switch {
		case superRO && !mountRO:
			why = "the kernel remounted it read-only (superblock ro, mount rw), typically after an I/O or metadata error"
		case prev.seenRW[mt.Point]:
			why = "it was writable earlier and was remounted read-only"
		default:
			continue // read-only by design
		}
		if reported[mt.Point] {
			continue
		}
		reported[mt.Point] = true
		var paths []string
		for _, w := range views {
			if w.Mount.Point == mt.Point {
				paths = append(paths, w.Path)
			}
		}
		dev := mt.Source
		if v.Device != "" && !strings.HasSuffix(dev, "/"+v.Device) {
			dev += " (" + v.Device + ")"
		}
		fs = append(fs, detection.Finding{
			Reason: health.ReasonFilesystemReadOnly,
			Message: fmt.Sprintf("%s filesystem %s on %s, holding %s, is read-only: %s",
				mt.FSType, dev, mt.Point, strings.Join(slices.Compact(paths), ", "), why),
			Observed: now,
			Subject:  mt.Point,
		})
	}
	return next, fs
}

// evalSpace reports FilesystemNearFull for each measured mount whose space
// or inodes in use reach threshold percent.
func evalSpace(us []usage, threshold float64, now time.Time) []detection.Finding {
	var fs []detection.Finding
	for _, u := range us {
		if u.Pseudo {
			continue
		}
		var what []string
		if u.BlocksPct >= threshold {
			what = append(what, fmt.Sprintf("%.1f%% of its space is used (%s of %s available)", u.BlocksPct, bytecount.Human(u.AvailBytes), bytecount.Human(u.TotalBytes)))
		}
		if u.InodesPct >= threshold {
			what = append(what, fmt.Sprintf("%.1f%% of its inodes are used (%d of %d free)", u.InodesPct, u.InodesFree, u.InodesTotal))
		}
		if len(what) == 0 {
			continue
		}
		fs = append(fs, detection.Finding{
			Reason: health.ReasonFilesystemNearFull,
			Message: fmt.Sprintf("filesystem on %s (holding %s) is nearly full: %s; threshold %g%%, before the kubelet's eviction thresholds",
				u.Point, u.Paths, strings.Join(what, " and "), threshold),
			Observed: now,
			Subject:  u.Point,
		})
	}
	return fs
}
