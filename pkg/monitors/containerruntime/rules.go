package containerruntime

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// RuntimeUnits are the systemd units of the container runtimes whose failures
// are ContainerRuntimeFailed.
var RuntimeUnits = []string{"containerd.service", "crio.service", "docker.service"}

// KubeletUnit is the kubelet's systemd unit.
const KubeletUnit = "kubelet.service"

// ProbeWindow is the sliding window in which probe failures are counted, and
// the least time between two findings of the same probe type.
const ProbeWindow = 5 * time.Minute

// maxWindowEntries bounds the failures remembered per probe type (the message
// then says "N+").
const maxWindowEntries = 1024

var (
	journal = []logline.Source{logline.Journal}
	// bySystemd: PID 1's messages about any unit; a daemon's own "Failed to
	// start ..." is not one.
	bySystemd = []logline.Provenance{logline.BySystemd}
)

// unitFailureRules are systemd's own messages about a failed unit, e.g.
//
//	containerd.service: Main process exited, code=killed, status=9/KILL
//	kubelet.service: Failed with result 'exit-code'.
//
// systemd logs a main process that exited successfully at debug level only;
// the status=0/SUCCESS exclusion is for journals kept at debug level.
func unitFailureRules(reason string, units []string) []logline.Rule {
	return []logline.Rule{{
		Reason:   reason,
		Sources:  journal,
		Accept:   logline.ByUnits(units...),
		Contains: []string{"Main process exited, code="},
		Exclude:  []string{"status=0/SUCCESS"},
		Pattern:  `Main process exited, code=(?P<code>[a-z]+), status=(?P<status>[^\s,]+)`,
	}, {
		Reason:   reason,
		Sources:  journal,
		Accept:   logline.ByUnits(units...),
		Contains: []string{"Failed with result"},
		Pattern:  `Failed with result '(?P<result>[^']+)'`,
	}}
}

// Rules implements detection.Monitor.
func (m *Monitor) Rules() []logline.Rule {
	rs := append(unitFailureRules(health.ReasonContainerRuntimeFailed, RuntimeUnits),
		unitFailureRules(health.ReasonKubeletFailed, []string{KubeletUnit})...)
	rs = append(rs,
		// systemd's job result (PID 1), any unit:
		//   Failed to start kubelet.service - Kubernetes Kubelet.   (systemd >= 253)
		//   Failed to start Kubernetes Kubelet.                     (older)
		// Anchored and ending in "." so that a daemon's own "Failed to start
		// server: ..." or a klog line ("E0612 ... \"Failed to start ...\"") does
		// not match.
		logline.Rule{
			Reason:   health.ReasonServiceFailedToStart,
			Sources:  journal,
			Accept:   bySystemd,
			Contains: []string{"Failed to start "},
			Pattern:  `^(?:[\w@.\\-]+: )?Failed to start (?P<what>[^:"]+?)\.\s*$`,
		},
		// kubelet.service: Scheduled restart job, restart counter is at 7.
		logline.Rule{
			Reason:   health.ReasonRepeatedRestart,
			Sources:  journal,
			Accept:   bySystemd,
			Contains: []string{"Scheduled restart job, restart counter is at "},
			Pattern:  `(?:(?P<unit>[\w@.\\-]+): )?Scheduled restart job, restart counter is at (?P<count>\d+)`,
		},
	)
	// I0612 08:15:42.123456    2140 prober.go:107] "Probe failed" probeType="Liveness" pod="default/web-0"
	//   podUID="..." containerName="web" probeResult="failure" output="..."
	for _, p := range []struct{ reason, typ string }{
		{health.ReasonLivenessProbeFailures, "Liveness"},
		{health.ReasonReadinessProbeFailures, "Readiness"},
	} {
		rs = append(rs, logline.Rule{
			Reason:   p.reason,
			Sources:  journal,
			Accept:   logline.ByUnits(KubeletUnit),
			Contains: []string{`"Probe failed"`, `probeType="` + p.typ + `"`},
			Pattern:  `^(?:.*? pod="(?P<pod>[^"]*)")?(?:.*? containerName="(?P<container>[^"]*)")?`,
		})
	}
	return rs
}

// Interpret implements detection.Monitor. It is safe for concurrent use.
func (m *Monitor) Interpret(match logline.Match) []detection.Finding {
	observed := match.Line.Time
	if observed.IsZero() {
		observed = m.clock.Now()
	}
	unit := match.Line.Unit
	if unit == "" {
		unit = match.Groups["unit"]
	}
	switch match.Reason {
	case health.ReasonRepeatedRestart:
		n, err := strconv.Atoi(match.Groups["count"])
		threshold := countThreshold(m.threshold(match.Reason))
		if err != nil || n < threshold {
			return nil
		}
		return []detection.Finding{{
			Reason:   match.Reason,
			Message:  fmt.Sprintf("%s is restarting in a loop: systemd restart counter is at %d (threshold %d)", orUnknown(unit), n, threshold),
			Observed: observed,
			Subject:  unit,
		}}
	case health.ReasonLivenessProbeFailures, health.ReasonReadinessProbeFailures:
		return m.interpretProbe(match, observed)
	}
	msg := match.Message
	if unit != "" && !strings.Contains(msg, unit) {
		msg = unit + ": " + msg
	}
	return []detection.Finding{{Reason: match.Reason, Message: msg, Observed: observed, Subject: unit}}
}

func (m *Monitor) interpretProbe(match logline.Match, observed time.Time) []detection.Finding {
	threshold := countThreshold(m.threshold(match.Reason))
	now := m.clock.Now()
	m.mu.Lock()
	w := m.probes[match.Reason]
	if w == nil {
		w = &rateWindow{}
		m.probes[match.Reason] = w
	}
	count, emit := w.record(now, ProbeWindow, threshold, maxWindowEntries)
	m.mu.Unlock()
	if !emit {
		return nil
	}
	typ := "liveness"
	if match.Reason == health.ReasonReadinessProbeFailures {
		typ = "readiness"
	}
	n := strconv.Itoa(count)
	if count >= maxWindowEntries {
		n += "+"
	}
	msg := fmt.Sprintf("%s %s probe failures on this node in the last %s (threshold %d)", n, typ, ProbeWindow, threshold)
	if pod := match.Groups["pod"]; pod != "" {
		msg += "; latest: pod " + pod
		if c := match.Groups["container"]; c != "" {
			msg += " container " + c
		}
	}
	return []detection.Finding{{Reason: match.Reason, Message: msg, Observed: observed}}
}

func orUnknown(s string) string {
	if s == "" {
		return "a unit"
	}
	return s
}

// rateWindow counts events in a sliding window and rate-limits what it
// reports. It does no I/O and reads no clock: now is an argument.
type rateWindow struct {
	times    []time.Time // oldest first, all within the window
	lastEmit time.Time
	emitted  bool
}

// record adds an event at now, forgets events older than span, and reports the
// count in the window and whether to emit: the count reached threshold and
// nothing was emitted in the last span. At most limit events are remembered.
func (w *rateWindow) record(now time.Time, span time.Duration, threshold, limit int) (count int, emit bool) {
	cut := 0
	for cut < len(w.times) && now.Sub(w.times[cut]) >= span {
		cut++
	}
	w.times = append(w.times[cut:], now)
	if len(w.times) > limit {
		w.times = w.times[len(w.times)-limit:]
	}
	count = len(w.times)
	if count >= threshold && (!w.emitted || now.Sub(w.lastEmit) >= span) {
		w.lastEmit, w.emitted = now, true
		return count, true
	}
	return count, false
}
