package networking

import (
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

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- EFAErrorMetric (EFA, InfiniBand, RoCE) ----------------------------------
//
// RDMA devices count their errors in sysfs
// (Documentation/ABI/stable/sysfs-class-infiniband):
// /sys/class/infiniband/DEV/ports/N/counters holds the InfiniBand port
// counters (PMA), ports/N/hw_counters and DEV/hw_counters the driver's own:
// the EFA driver's (drivers/infiniband/hw/efa/efa_verbs.c) and mlx5's RoCE
// and transport counters (drivers/infiniband/hw/mlx5/counters.c). A slow
// creep of errors is normal on a busy fabric; a counter climbing faster than
// its allowance means a degraded link or remote.

const infinibandDir = "sys/class/infiniband"

// rdmaAllowances are the error counters watched and the increase per minute
// each may have before it is reported. Counters not listed (traffic, bytes,
// congestion notifications) are not errors.
var rdmaAllowances = map[string]float64{
	// EFA (hw_counters): receive drops, failed RDMA work requests, remotes
	// that stopped answering, retransmissions.
	"rx_drops": 160, "rdma_read_wr_err": 160, "rdma_write_wr_err": 160,
	"unresponsive_remote_events": 160, "impaired_remote_conn_events": 160, "retrans_timeout_events": 160,
	"retrans_pkts": 61_000, "retrans_bytes": 61_000_000,
	// InfiniBand port counters (counters/): a link going down, physical
	// errors and receive errors.
	"link_downed": 0, "link_error_recovery": 1, "local_link_integrity_errors": 1, "excessive_buffer_overrun_errors": 1,
	"symbol_error": 10, "port_rcv_errors": 10, "port_rcv_remote_physical_errors": 10, "port_xmit_discards": 100,
	// mlx5 transport and RoCE counters (hw_counters/): timeouts, retry
	// exhaustion and sequence errors of reliable connections, error completions.
	"local_ack_timeout_err": 10, "rnr_nak_retry_err": 10, "req_cqe_error": 10, "resp_cqe_error": 10,
	"req_remote_access_errors": 10, "req_remote_invalid_request": 10, "resp_remote_access_errors": 10,
	"packet_seq_err": 100, "out_of_sequence": 100, "implied_nak_seq_err": 100, "duplicate_request": 100,
}

// rdmaCounter is one reading.
type rdmaCounter struct {
	Device, Port, Name string
	Value              uint64
}

// rdmaDevice describes a device for messages.
type rdmaDevice struct{ Kind string }

// rdmaReading is what one check reads: the watched counters of every device.
type rdmaReading struct {
	Devices  map[string]rdmaDevice
	Counters []rdmaCounter
}

type rdmaKey struct{ device, port, name string }

// rdmaState is the previous reading of each counter, and when it was made.
type rdmaState struct {
	at     time.Time
	values map[rdmaKey]uint64
}

func (m *Monitor) runRDMA(ctx context.Context) ([]detection.Finding, error) {
	r, err := gather(ctx, m, &m.rdmaGuard, "RDMA counters in sysfs", m.readRDMA)
	if err != nil {
		return nil, err
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.rdma, fs = evalRDMA(m.rdma, r, now)
	return fs, nil
}

// readRDMA reads the watched counters of every RDMA device. A node without
// any has nothing to read.
func (m *Monitor) readRDMA() (rdmaReading, error) {
	r := rdmaReading{Devices: map[string]rdmaDevice{}}
	root := m.hostPath(infinibandDir)
	devs, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	for _, d := range devs {
		dev := d.Name()
		dir := filepath.Join(root, dev)
		r.Devices[dev] = rdmaDevice{Kind: rdmaKind(dir)}
		r.Counters = append(r.Counters, readCounters(filepath.Join(dir, "hw_counters"), dev, "")...)
		ports, _ := os.ReadDir(filepath.Join(dir, "ports"))
		for _, p := range ports {
			for _, sub := range []string{"counters", "hw_counters"} {
				r.Counters = append(r.Counters, readCounters(filepath.Join(dir, "ports", p.Name(), sub), dev, p.Name())...)
			}
		}
	}
	return r, nil
}

// readCounters reads the watched counters of one directory; a counter that
// cannot be read or parsed (some read "N/A" on some link layers) is left out.
func readCounters(dir, dev, port string) []rdmaCounter {
	var out []rdmaCounter
	for name := range rdmaAllowances {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, rdmaCounter{Device: dev, Port: port, Name: name, Value: v})
	}
	return out
}

// rdmaKind names a device: EFA (Amazon's PCI vendor 0x1d0f, devices
// 0xefa*), else InfiniBand or RoCE by the link layer of its first port.
func rdmaKind(dir string) string {
	vendor, _ := os.ReadFile(filepath.Join(dir, "device", "vendor"))
	device, _ := os.ReadFile(filepath.Join(dir, "device", "device"))
	if strings.TrimSpace(string(vendor)) == "0x1d0f" && strings.HasPrefix(strings.TrimSpace(string(device)), "0xefa") {
		return "EFA"
	}
	ll, _ := os.ReadFile(filepath.Join(dir, "ports", "1", "link_layer"))
	if strings.TrimSpace(string(ll)) == "Ethernet" {
		return "RoCE"
	}
	return "InfiniBand"
}

// evalRDMA compares each counter with the previous check's reading and
// reports, per device port, the counters that rose faster than their
// allowance per minute. A first reading, or a counter that went down (a
// driver reload reset it), is a new baseline.
func evalRDMA(prev rdmaState, r rdmaReading, now time.Time) (rdmaState, []detection.Finding) {
	next := rdmaState{at: now, values: map[rdmaKey]uint64{}}
	minutes := now.Sub(prev.at).Minutes()
	type over struct {
		name      string
		delta     uint64
		perMinute float64
	}
	byPort := map[[2]string][]over{}
	for _, c := range r.Counters {
		k := rdmaKey{c.Device, c.Port, c.Name}
		next.values[k] = c.Value
		old, ok := prev.values[k]
		if !ok || c.Value < old || prev.at.IsZero() || minutes <= 0 {
			continue
		}
		delta := c.Value - old
		rate := float64(delta) / math.Max(minutes, 1.0/60)
		if delta > 0 && rate > rdmaAllowances[c.Name] {
			byPort[[2]string{c.Device, c.Port}] = append(byPort[[2]string{c.Device, c.Port}], over{c.Name, delta, rate})
		}
	}
	keys := make([][2]string, 0, len(byPort))
	for k := range byPort {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	var fs []detection.Finding
	for _, k := range keys {
		overs := byPort[k]
		sort.Slice(overs, func(i, j int) bool { return overs[i].name < overs[j].name })
		var parts []string
		for _, o := range overs {
			parts = append(parts, fmt.Sprintf("%s +%d (%.0f/min, allowance %g/min)", o.name, o.delta, o.perMinute, rdmaAllowances[o.name]))
		}
		where, subject := k[0], k[0]
		if k[1] != "" {
			where += " port " + k[1]
			subject += "/" + k[1]
		}
		kind := r.Devices[k[0]].Kind
		fs = append(fs, detection.Finding{
			Reason:   health.ReasonEFAErrorMetric,
			Message:  fmt.Sprintf("%s device %s: error counters rise fast since the last check %v ago: %s", kind, where, now.Sub(prev.at).Round(time.Second), strings.Join(parts, ", ")),
			Observed: now,
			Subject:  subject,
		})
	}
	return next, fs
}
