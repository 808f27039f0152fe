package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/internal/childproc"
	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- XFSSmallAverageClusterSize ----------------------------------------------

// FreeSpaceReader reads the free space summary of the XFS filesystem on a
// block device: what `xfs_db -r -c "freesp -s" DEVICE` prints. device is the
// host path of the device node, e.g. /dev/nvme1n1.
type FreeSpaceReader interface {
	FreeSpaceSummary(ctx context.Context, device string) ([]byte, error)
}

// ErrNoXFSDB is returned when neither the host nor the agent has xfs_db.
var ErrNoXFSDB = errors.New("xfs_db (xfsprogs) is not installed on the host or in the agent image")

// XFSDB reads free space summaries with xfs_db, read-only. It prefers the
// host's own xfs_db, run chrooted in the host root, whose version knows
// the features of the host's filesystems; else one on the agent's PATH,
// given the device under the host root.
type XFSDB struct {
	HostRoot string
}

// hostXFSDB are where distributions install xfs_db.
var hostXFSDB = []string{"/usr/sbin/xfs_db", "/sbin/xfs_db", "/usr/bin/xfs_db"}

// xfsDBTimeout bounds one xfs_db run: it reads the free space btree of each
// allocation group, a few seconds on a large, fragmented filesystem.
const xfsDBTimeout = 2 * time.Minute

// maxXFSDBOutput bounds the summary: a histogram of at most ~40 lines.
const maxXFSDBOutput = 64 << 10

// FreeSpaceSummary implements FreeSpaceReader.
func (x XFSDB) FreeSpaceSummary(ctx context.Context, device string) ([]byte, error) {
	root := x.HostRoot
	if root == "" {
		root = "/"
	}
	args := func(dev string) []string { return []string{"-r", "-c", "freesp -s", dev} }
	for _, p := range hostXFSDB {
		// Looked up inside the host root (links resolved there), and run
		// only if root alone could have written it and what it loads.
		switch p, err := childproc.LookPathInRoot(root, p); {
		case err == nil:
			return childproc.Output(ctx, childproc.Tool{Path: p, Args: args(device), Root: root, Limit: maxXFSDBOutput})
		case errors.Is(err, childproc.ErrUntrusted):
			return nil, err
		}
	}
	if p, err := childproc.LookPathInRoot("/", "xfs_db"); err == nil {
		return childproc.Output(ctx, childproc.Tool{Path: p, Args: args(filepath.Join(root, device)), Limit: maxXFSDBOutput})
	} else if errors.Is(err, childproc.ErrUntrusted) {
		return nil, err
	}
	return nil, ErrNoXFSDB
}

// xfsDevice is one mounted XFS filesystem: its block device and where it
// is mounted.
type xfsDevice struct {
	Major, Minor int
	// Device is the kernel's name, Points the mount points.
	Device string
	Points []string
}

// freeSpace is the summary xfs_db prints after the histogram
// (xfsprogs db/freesp.c):
//
//	total free extents 1530
//	total free blocks 54012
//	average free extent size 35.302
type freeSpace struct {
	Extents, Blocks uint64
	Average         float64
}

func (m *Monitor) runXFS(ctx context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonXFSSmallAverageClusterSize
	thr := m.env.Threshold(reason)
	if math.IsNaN(thr) || thr <= 0 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a positive number of blocks", reason, thr)
	}
	devs, err := bounded.Run(ctx, &m.xfsGuard, "reading "+mountinfoPath, m.opts.ProbeTimeout, m.xfsDevices)
	if err != nil {
		return nil, err
	}
	// Without XFS mounted there is nothing to check, and no tool is needed.
	var sums []xfsSummary
	var errs []error
	for _, d := range devs {
		out, err := bounded.Run(ctx, m.guard(m.xfsGuards, d.Device), "xfs_db freesp on /dev/"+d.Device, xfsDBTimeout,
			func() ([]byte, error) {
				tctx, cancel := context.WithTimeout(ctx, xfsDBTimeout)
				defer cancel()
				return m.opts.FreeSpace.FreeSpaceSummary(tctx, "/dev/"+d.Device)
			})
		if errors.Is(err, ErrNoXFSDB) {
			return nil, err // once, not per device
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fs, err := parseFreeSpace(out)
		if err != nil {
			errs = append(errs, fmt.Errorf("xfs_db freesp on /dev/%s: %w", d.Device, err))
			continue
		}
		sums = append(sums, xfsSummary{Dev: d, Free: fs})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return evalXFS(sums, thr, m.env.Clock.Now()), nil
}

// xfsDevices lists the block devices with a mounted XFS filesystem, each
// once (a filesystem bind-mounted in many places is one device).
func (m *Monitor) xfsDevices() ([]xfsDevice, error) {
	data, err := os.ReadFile(m.hostPath(mountinfoPath))
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.Parse(data)
	if err != nil {
		return nil, err
	}
	byDev := map[[2]int]*xfsDevice{}
	var order [][2]int
	for _, mt := range mounts {
		if mt.FSType != "xfs" || mt.Major == 0 {
			continue
		}
		k := [2]int{mt.Major, mt.Minor}
		d := byDev[k]
		if d == nil {
			name := m.deviceName(mt)
			if name == "" {
				continue // no device node to read
			}
			d = &xfsDevice{Major: mt.Major, Minor: mt.Minor, Device: name}
			byDev[k] = d
			order = append(order, k)
		}
		d.Points = append(d.Points, mt.Point)
	}
	out := make([]xfsDevice, 0, len(order))
	for _, k := range order {
		out = append(out, *byDev[k])
	}
	return out, nil
}

// parseFreeSpace reads the summary lines of xfs_db's freesp -s output; the
// histogram before them is ignored.
func parseFreeSpace(out []byte) (freeSpace, error) {
	var fs freeSpace
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var err error
		switch {
		case strings.HasPrefix(line, "total free extents "):
			fs.Extents, err = strconv.ParseUint(strings.TrimPrefix(line, "total free extents "), 10, 64)
			seen |= 1
		case strings.HasPrefix(line, "total free blocks "):
			fs.Blocks, err = strconv.ParseUint(strings.TrimPrefix(line, "total free blocks "), 10, 64)
			seen |= 2
		case strings.HasPrefix(line, "average free extent size "):
			// "nan" or "-nan" when there is no free extent; recomputed below.
			seen |= 4
		}
		if err != nil {
			return freeSpace{}, fmt.Errorf("malformed summary line %q: %w", line, err)
		}
	}
	if seen != 7 {
		return freeSpace{}, fmt.Errorf("no free space summary in the output %q", textcut.Ellipsis(string(out), quoteLimit))
	}
	if fs.Extents > 0 {
		fs.Average = float64(fs.Blocks) / float64(fs.Extents)
	}
	return fs, nil
}

type xfsSummary struct {
	Dev  xfsDevice
	Free freeSpace
}

// evalXFS reports each XFS filesystem whose average free extent is smaller
// than threshold blocks. A filesystem without free extents is full, which
// FilesystemNearFull reports; it is not fragmented.
func evalXFS(sums []xfsSummary, threshold float64, now time.Time) []detection.Finding {
	var fs []detection.Finding
	for _, s := range sums {
		if s.Free.Extents == 0 || s.Free.Average >= threshold {
			continue
		}
		points := append([]string(nil), s.Dev.Points...)
		sort.Strings(points)
		fs = append(fs, detection.Finding{
			Reason: health.ReasonXFSSmallAverageClusterSize,
			Message: fmt.Sprintf("XFS on /dev/%s (%s): the average free extent is %.1f blocks (threshold %g) over %d free extents, %d free blocks: "+
				"free space is fragmented and file or inode allocation can fail with ENOSPC", s.Dev.Device, strings.Join(points, ", "),
				s.Free.Average, threshold, s.Free.Extents, s.Free.Blocks),
			Observed: now,
			Subject:  s.Dev.Device,
		})
	}
	return fs
}
