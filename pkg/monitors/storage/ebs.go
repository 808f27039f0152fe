package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"nodemend.dev/nodemend/internal/bounded"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// The EBS NVMe statistics log page. Source: Amazon EBS User Guide, "Amazon
// EBS detailed performance statistics" (the statistics, their units and
// that they are read with an NVMe Get Log Page admin command, as nvme-cli's
// `nvme amzn stats` does), and the layout nvme-cli's amzn plugin reads:
// log identifier 0xD0, 4096 bytes, little-endian, starting with
//
//	offset  field (u64)
//	     0  magic, 0x3C23B510 for EBS
//	     8  total_read_ops
//	    16  total_write_ops
//	    24  total_read_bytes
//	    32  total_write_bytes
//	    40  total_read_time                              µs
//	    48  total_write_time                             µs
//	    56  ebs_volume_performance_exceeded_iops         µs
//	    64  ebs_volume_performance_exceeded_tp           µs
//	    72  ec2_instance_ebs_performance_exceeded_iops   µs
//	    80  ec2_instance_ebs_performance_exceeded_tp     µs
//	    88  volume_queue_length                          (point in time)
//	    96  reserved, then the read and write latency histograms
const (
	ebsLogPageID  = 0xD0
	ebsLogPageLen = 4096
	ebsMagic      = 0x3C23B510
	ebsFieldsLen  = 96
	// ebsModel is what EBS volumes report as the NVMe controller's model
	// (sysfs /sys/class/nvme/nvmeN/model).
	ebsModel = "Amazon Elastic Block Store"
)

// ebsStats are the counters of one EBS volume's log page.
type ebsStats struct {
	ReadOps, WriteOps, ReadBytes, WriteBytes uint64
	ReadTimeMicros, WriteTimeMicros          uint64
	// The four "exceeded" counters: cumulative time, in microseconds,
	// during which demand exceeded the volume's provisioned IOPS or
	// throughput, or the instance's EBS maximums.
	VolumeIOPSExceeded, VolumeTPExceeded     uint64
	InstanceIOPSExceeded, InstanceTPExceeded uint64
	QueueLength                              uint64
}

// parseEBSLogPage parses log page 0xD0 of an EBS volume. A page with
// another magic (an instance store volume, 0xEC2C0D7E) is an error.
func parseEBSLogPage(b []byte) (ebsStats, error) {
	if len(b) < ebsFieldsLen {
		return ebsStats{}, fmt.Errorf("EBS log page of %d bytes, want at least %d", len(b), ebsFieldsLen)
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if magic := u(0); magic != ebsMagic {
		return ebsStats{}, fmt.Errorf("log page 0xD0 magic 0x%X is not EBS's 0x%X", magic, ebsMagic)
	}
	return ebsStats{
		ReadOps: u(8), WriteOps: u(16), ReadBytes: u(24), WriteBytes: u(32),
		ReadTimeMicros: u(40), WriteTimeMicros: u(48),
		VolumeIOPSExceeded: u(56), VolumeTPExceeded: u(64),
		InstanceIOPSExceeded: u(72), InstanceTPExceeded: u(80),
		QueueLength: u(88),
	}, nil
}

// LogPageReader reads an NVMe log page from a controller device. NVMeAdmin
// is the real one; tests serve byte fixtures.
type LogPageReader interface {
	// ReadLogPage fills buf with log page id of the controller at device
	// (an absolute path, e.g. <host-root>/dev/nvme1).
	ReadLogPage(device string, id uint8, buf []byte) error
}

// ebsCounter is one "exceeded" counter and its reason.
type ebsCounter struct {
	Reason string
	Name   string
	What   string
	get    func(ebsStats) uint64
}

func ebsCounterSpecs() []ebsCounter {
	return []ebsCounter{
		{health.ReasonEBSVolumeIOPSExceeded, "ebs_volume_performance_exceeded_iops", "IOPS demand exceeded the volume's provisioned IOPS",
			func(s ebsStats) uint64 { return s.VolumeIOPSExceeded }},
		{health.ReasonEBSVolumeThroughputExceeded, "ebs_volume_performance_exceeded_tp", "throughput demand exceeded the volume's provisioned throughput",
			func(s ebsStats) uint64 { return s.VolumeTPExceeded }},
		{health.ReasonEBSInstanceIOPSExceeded, "ec2_instance_ebs_performance_exceeded_iops", "EBS IOPS demand exceeded the instance's maximum",
			func(s ebsStats) uint64 { return s.InstanceIOPSExceeded }},
		{health.ReasonEBSInstanceThroughputExceeded, "ec2_instance_ebs_performance_exceeded_tp", "EBS throughput demand exceeded the instance's maximum",
			func(s ebsStats) uint64 { return s.InstanceTPExceeded }},
	}
}

func ebsReasons() []string {
	var rs []string
	for _, c := range ebsCounterSpecs() {
		rs = append(rs, c.Reason)
	}
	return rs
}

// ebsVolume is one EBS controller found in sysfs.
type ebsVolume struct {
	Controller string // nvme1
	VolumeID   string // vol-0123456789abcdef0
}

func (m *Monitor) runEBS(ctx context.Context) ([]detection.Finding, error) {
	vols, err := ebsVolumes(m.hostPath("sys/class/nvme"))
	if err != nil {
		return nil, err
	}
	cur := map[string]ebsStats{}
	ids := map[string]string{}
	var errs []error
	for _, v := range vols {
		dev := m.hostPath(filepath.Join("dev", v.Controller))
		st, err := bounded.Run(ctx, m.guard(m.ebsGuards, v.Controller), "NVMe Get Log Page 0xD0 on "+v.Controller, m.opts.ProbeTimeout, func() (ebsStats, error) {
			buf := make([]byte, ebsLogPageLen) // its own buffer: a stuck ioctl keeps it
			if err := m.opts.LogPages.ReadLogPage(dev, ebsLogPageID, buf); err != nil {
				return ebsStats{}, err
			}
			return parseEBSLogPage(buf)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", v.Controller, v.VolumeID, err))
			continue
		}
		cur[v.Controller], ids[v.Controller] = st, v.VolumeID
	}
	if err := errors.Join(errs...); err != nil && len(cur) == 0 {
		return nil, err
	}
	thr := map[string]float64{}
	for _, c := range ebsCounterSpecs() {
		thr[c.Reason] = m.env.Threshold(c.Reason)
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	// A volume that could not be read this time keeps its previous reading.
	for dev, st := range m.ebs {
		if _, ok := cur[dev]; !ok && slices.ContainsFunc(vols, func(v ebsVolume) bool { return v.Controller == dev }) {
			cur[dev] = st
		}
	}
	var fs []detection.Finding
	m.ebs, fs = evalEBS(m.ebs, cur, ids, thr, now)
	return fs, nil
}

// ebsVolumes lists the NVMe controllers of dir (sysfs class nvme) whose
// model is Amazon EBS. A node without NVMe has none.
func ebsVolumes(dir string) ([]ebsVolume, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ebsVolume
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "nvme") {
			continue
		}
		model, err := os.ReadFile(filepath.Join(dir, name, "model"))
		if err != nil || strings.TrimSpace(string(model)) != ebsModel {
			continue
		}
		serial, _ := os.ReadFile(filepath.Join(dir, name, "serial"))
		out = append(out, ebsVolume{Controller: name, VolumeID: volumeID(strings.TrimSpace(string(serial)))})
	}
	slices.SortFunc(out, func(a, b ebsVolume) int { return cmp.Compare(a.Controller, b.Controller) })
	return out, nil
}

// volumeID turns an EBS controller serial ("vol0123456789abcdef0") into
// the volume ID ("vol-0123456789abcdef0").
func volumeID(serial string) string {
	if rest, ok := strings.CutPrefix(serial, "vol"); ok && rest != "" && !strings.HasPrefix(rest, "-") {
		return "vol-" + rest
	}
	return serial
}

// evalEBS compares each volume's exceeded counters with the previous
// reading and reports those that grew by at least their threshold (in
// microseconds of throttled time). A first reading is a baseline; a counter
// that went down (a new attachment, counters reset) starts a new one.
func evalEBS(prev, cur map[string]ebsStats, ids map[string]string, thr map[string]float64, now time.Time) (map[string]ebsStats, []detection.Finding) {
	devs := make([]string, 0, len(cur))
	for d := range cur {
		devs = append(devs, d)
	}
	slices.Sort(devs)
	var fs []detection.Finding
	for _, d := range devs {
		old, ok := prev[d]
		if !ok {
			continue
		}
		id := ids[d]
		if id == "" {
			id = d
		}
		for _, c := range ebsCounterSpecs() {
			v, o := c.get(cur[d]), c.get(old)
			if v <= o {
				continue
			}
			limit := thr[c.Reason]
			if limit < 1 || math.IsNaN(limit) {
				limit = 1
			}
			delta := v - o
			if float64(delta) < limit {
				continue
			}
			fs = append(fs, detection.Finding{
				Reason: c.Reason,
				Message: fmt.Sprintf("EBS volume %s (%s): %s for %v since the last check (%s %d → %d µs); I/O was throttled",
					id, d, c.What, time.Duration(delta)*time.Microsecond, c.Name, o, v),
				Observed: now,
				Subject:  id,
			})
		}
	}
	return cur, fs
}
