package networking

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Host paths of the sysctl check. /proc/sys/net is per network namespace:
// the files are opened on a thread inside the inspected namespace.
const (
	conntrackCountPath = "proc/sys/net/netfilter/nf_conntrack_count"
	conntrackMaxPath   = "proc/sys/net/netfilter/nf_conntrack_max"
	ipForwardPath      = "proc/sys/net/ipv4/ip_forward"
	cniConfDir         = "etc/cni/net.d"
)

// sysctls is the input of the sysctl check.
type sysctls struct {
	// ConntrackLoaded is false when nf_conntrack is not loaded (no files):
	// nothing is tracked, nothing can fill up.
	ConntrackLoaded     bool
	ConntrackCount, Max uint64
	IPForward           string
	// CNIConfigs are the CNI configuration files of /etc/cni/net.d.
	CNIConfigs []string
}

func (m *Monitor) runSysctls(ctx context.Context) ([]detection.Finding, error) {
	const reason = health.ReasonApproachingConntrackMax
	thr := m.env.Threshold(reason)
	if math.IsNaN(thr) || thr <= 0 || thr > 100 {
		return nil, fmt.Errorf("%s: invalid threshold %v: want a percentage in (0, 100]", reason, thr)
	}
	s, err := gather(ctx, m, &m.sysctlGuard, "reading network sysctls", m.readSysctls)
	if err != nil {
		return nil, err
	}
	return evalSysctls(s, thr, m.env.Clock.Now()), nil
}

func (m *Monitor) readSysctls() (sysctls, error) {
	var s sysctls
	count, errCount := readUintFile(m.hostPath(conntrackCountPath))
	max, errMax := readUintFile(m.hostPath(conntrackMaxPath))
	switch {
	case errors.Is(errCount, fs.ErrNotExist) && errors.Is(errMax, fs.ErrNotExist):
	case errCount != nil:
		return s, errCount
	case errMax != nil:
		return s, errMax
	default:
		s.ConntrackLoaded, s.ConntrackCount, s.Max = true, count, max
	}
	fwd, err := os.ReadFile(m.hostPath(ipForwardPath))
	if err != nil {
		return s, err
	}
	s.IPForward = string(bytes.TrimSpace(fwd))
	s.CNIConfigs, err = cniConfigs(m.hostPath(cniConfDir))
	return s, err
}

// cniConfigs lists the CNI configuration files of dir (what the kubelet's
// runtime loads: *.conf, *.conflist, *.json). A missing directory is none.
func cniConfigs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".conf") || strings.HasSuffix(n, ".conflist") || strings.HasSuffix(n, ".json")) {
			out = append(out, n)
		}
	}
	return out, nil
}

func readUintFile(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// evalSysctls reports ApproachingConntrackMax when the conntrack table holds
// at least threshold percent of nf_conntrack_max, and NetworkSysctl when IPv4
// forwarding is off on a node with a CNI configured: the host then drops the
// pod traffic it should route. A node without a CNI has no pod network to
// forward (this very machine, a fresh namespace).
func evalSysctls(s sysctls, threshold float64, now time.Time) []detection.Finding {
	var fs []detection.Finding
	if s.ConntrackLoaded && s.Max > 0 && float64(s.ConntrackCount)*100 >= threshold*float64(s.Max) {
		fs = append(fs, detection.Finding{
			Reason: health.ReasonApproachingConntrackMax,
			Message: fmt.Sprintf("connection tracking table holds %d entries, %.1f%% of net.netfilter.nf_conntrack_max %d (threshold %g%%); when full, new connections are dropped",
				s.ConntrackCount, float64(s.ConntrackCount)*100/float64(s.Max), s.Max, threshold),
			Observed: now,
		})
	}
	if len(s.CNIConfigs) > 0 && s.IPForward != "1" {
		fs = append(fs, detection.Finding{
			Reason: health.ReasonNetworkSysctl,
			Message: fmt.Sprintf("net.ipv4.ip_forward is %q, not 1, on a node with a CNI configured (%s): the host does not route pod traffic",
				s.IPForward, strings.Join(s.CNIConfigs, ", ")),
			Observed: now,
		})
	}
	return fs
}
