package networking

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// proxyProbe is what one kube-proxy health probe saw.
type proxyProbe struct {
	// Absent is true when nothing listens: no kube-proxy on this node (a CNI
	// replacing it, such as Cilium), or it is not running.
	Absent bool
	// Err is a failure to talk to it (a timeout, a reset), Status and Body
	// its answer otherwise.
	Err    error
	Status int
	Body   string
	Path   string
}

// proxyState is what the kube-proxy check remembers.
type proxyState struct {
	// seen is true once kube-proxy answered: from then on, silence is a fault.
	seen    bool
	strikes strikes
}

func (m *Monitor) runKubeProxy(ctx context.Context) ([]detection.Finding, error) {
	p, err := gather(ctx, m, &m.proxyGuard, "kube-proxy health probe", func() (proxyProbe, error) {
		return probeKubeProxy(ctx, m.opts.KubeProxyHealthz, m.opts.ProbeTimeout), nil
	})
	if err != nil {
		return nil, err
	}
	thr := m.countThreshold(health.ReasonKubeProxyNotReady)
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.proxy, fs = evalKubeProxy(m.proxy, p, m.opts.KubeProxyHealthz, thr, now)
	return fs, nil
}

// probeKubeProxy asks kube-proxy's /livez (1.28+: the proxier's own health,
// independent of whether this node should receive load-balancer traffic),
// falling back to /healthz on older versions.
func probeKubeProxy(ctx context.Context, addr string, timeout time.Duration) proxyProbe {
	for _, path := range []string{"/livez", "/healthz"} {
		res, err := httpGet(ctx, "tcp", addr, path, timeout)
		switch {
		case errors.Is(err, errNoListener):
			return proxyProbe{Absent: true, Path: path}
		case err != nil:
			return proxyProbe{Err: err, Path: path}
		case res.Status == http.StatusNotFound && path == "/livez":
			continue
		}
		return proxyProbe{Status: res.Status, Body: oneLine(res.Body), Path: path}
	}
	return proxyProbe{Status: http.StatusNotFound, Path: "/healthz"}
}

// evalKubeProxy reports KubeProxyNotReady after threshold consecutive probes
// that failed: kube-proxy answered with an error status (its last rules sync
// is too old), did not answer, or stopped listening after it was seen. A
// node where kube-proxy was never seen has none, which is not a fault.
func evalKubeProxy(prev proxyState, p proxyProbe, addr string, threshold int, now time.Time) (proxyState, []detection.Finding) {
	next := prev
	var why string
	switch {
	case p.Absent && !prev.seen:
		return proxyState{}, nil
	case p.Absent:
		why = "kube-proxy stopped listening (it answered before)"
	case p.Err != nil:
		next.seen = true
		why = fmt.Sprintf("no answer: %v", p.Err)
	case p.Status >= 200 && p.Status < 300:
		return proxyState{seen: true}, nil
	default:
		next.seen = true
		why = fmt.Sprintf("HTTP %d %s", p.Status, p.Body)
	}
	n := next.strikes.fail(now)
	if n < threshold {
		return next, nil
	}
	return next, []detection.Finding{{
		Reason: health.ReasonKubeProxyNotReady,
		Message: fmt.Sprintf("kube-proxy at %s%s has failed %d consecutive health checks since %s: %s; Service rules on this node may be stale",
			addr, p.Path, n, next.strikes.since.UTC().Format(time.RFC3339), why),
		Observed: now,
	}}
}
