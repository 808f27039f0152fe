package networking

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// allowance is one ENA "allowance exceeded" counter: packets queued or
// dropped because the instance exceeded an allowance. Names and meanings
// from the Amazon EC2 User Guide, "Monitor network performance for ENA
// settings on your EC2 instance" (ENA driver 2.2.10 and later).
type allowance struct {
	Stat   string
	Reason string
	What   string
}

func allowances() []allowance {
	return []allowance{
		{"bw_in_allowance_exceeded", health.ReasonBandwidthInExceeded, "inbound aggregate bandwidth exceeded the instance's allowance"},
		{"bw_out_allowance_exceeded", health.ReasonBandwidthOutExceeded, "outbound aggregate bandwidth exceeded the instance's allowance"},
		{"pps_allowance_exceeded", health.ReasonPPSExceeded, "bidirectional packets per second exceeded the instance's allowance"},
		{"conntrack_allowance_exceeded", health.ReasonConntrackExceeded, "connection tracking exceeded the instance's allowance"},
		{"linklocal_allowance_exceeded", health.ReasonLinkLocalExceeded, "traffic to link-local services (metadata, Amazon DNS, time sync) exceeded the interface's PPS allowance"},
	}
}

func allowanceReasons() []string {
	var rs []string
	for _, a := range allowances() {
		rs = append(rs, a.Reason)
	}
	return rs
}

// StatsSource opens ethtool statistics readers. EthtoolStats is the real one.
type StatsSource interface {
	// Open returns a reader whose socket is in the calling thread's network
	// namespace; the caller closes it.
	Open() (StatsReader, error)
}

// StatsReader reads the driver statistics of one interface (ethtool -S).
type StatsReader interface {
	Stats(iface string) (map[string]uint64, error)
	Close()
}

// EthtoolStats reads statistics with the ETHTOOL_GDRVINFO, ETHTOOL_GSTRINGS
// and ETHTOOL_GSTATS ioctls on an AF_INET socket, as ethtool -S does,
// without running a binary.
type EthtoolStats struct{}

// Open implements StatsSource.
func (EthtoolStats) Open() (StatsReader, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	return e, nil
}

// counterKey identifies one counter of one interface.
type counterKey struct{ Iface, Stat string }

func (m *Monitor) runAllowances(ctx context.Context) ([]detection.Finding, error) {
	if m.excludeErr != nil {
		return nil, m.excludeErr
	}
	cur, err := gather(ctx, m, &m.enaGuard, "ethtool statistics", func() (map[counterKey]uint64, error) {
		return m.readAllowances()
	})
	if err != nil {
		return nil, err
	}
	thr := map[string]float64{}
	for _, a := range allowances() {
		thr[a.Reason] = m.env.Threshold(a.Reason)
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.counters, fs = evalAllowances(m.counters, cur, thr, now)
	return fs, nil
}

// readAllowances reads the allowance counters of every watched interface
// that has them (ENA interfaces; other drivers have none).
func (m *Monitor) readAllowances() (map[counterKey]uint64, error) {
	links, err := linkList()
	if err != nil {
		return nil, err
	}
	r, err := m.opts.Stats.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cur := map[counterKey]uint64{}
	for _, l := range links {
		if l.Loopback || m.exclude.excludes(l) {
			continue
		}
		stats, err := r.Stats(l.Name)
		if err != nil {
			if noStats(err) {
				continue
			}
			return nil, fmt.Errorf("ethtool statistics of %s: %w", l.Name, err)
		}
		for _, a := range allowances() {
			if v, ok := stats[a.Stat]; ok {
				cur[counterKey{l.Name, a.Stat}] = v
			}
		}
	}
	return cur, nil
}

// noStats reports an ethtool error that means "this interface has no
// statistics", or that it vanished between the link dump and the ioctl.
func noStats(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EINVAL)
}

// evalAllowances compares the counters read now with the previous reading
// and reports a counter that grew by at least its reason's threshold. The
// first reading of a counter only sets the baseline (a long-running node has
// large totals that say nothing about now). A counter that went down (driver
// reset or reload) starts a new baseline. The returned map is the next
// previous reading: counters of vanished interfaces are dropped.
func evalAllowances(prev, cur map[counterKey]uint64, thr map[string]float64, now time.Time) (map[counterKey]uint64, []detection.Finding) {
	byStat := map[string]allowance{}
	for _, a := range allowances() {
		byStat[a.Stat] = a
	}
	keys := make([]counterKey, 0, len(cur))
	for k := range cur {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b counterKey) int {
		return cmp.Or(strings.Compare(a.Iface, b.Iface), strings.Compare(a.Stat, b.Stat))
	})
	var fs []detection.Finding
	for _, k := range keys {
		v := cur[k]
		old, ok := prev[k]
		a, known := byStat[k.Stat]
		if !ok || !known || v <= old {
			continue
		}
		delta := v - old
		limit := thr[a.Reason]
		if limit < 1 || math.IsNaN(limit) {
			limit = 1
		}
		if float64(delta) < limit {
			continue
		}
		fs = append(fs, detection.Finding{
			Reason: a.Reason,
			Message: fmt.Sprintf("%s on %s increased by %d since the last check (%d → %d): packets were queued or dropped because %s",
				k.Stat, k.Iface, delta, old, v, a.What),
			Observed: now,
			Subject:  k.Iface,
		})
	}
	return cur, fs
}
