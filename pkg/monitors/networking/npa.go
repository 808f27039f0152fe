package networking

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- NPANotRunning, NPARepeatedlyRestart, NPABPFRecoveryError -----------------
//
// The Amazon VPC network policy agent enforces NetworkPolicies with eBPF. It
// runs as the aws-eks-nodeagent container of the VPC CNI's aws-node pod, or
// (EKS Auto Mode) as the systemd unit aws-network-policy-agent.service. A
// node with neither does not run it, and these checks do not apply.

const (
	npaContainer = "aws-eks-nodeagent"
	npaUnit      = "aws-network-policy-agent.service"
	// npaLogPath is the agent's log (its --log-file default), zap JSON
	// rotated by lumberjack.
	npaLogPath = "var/log/aws-routed-eni/network-policy-agent.log"
	// npaWindow is the window restarts and BPF recovery errors count in.
	npaWindow = time.Hour
)

// npaBPFErrors are the network policy agent's messages when recovering its
// BPF programs and maps after a restart fails (pkg/ebpf/bpf_client.go).
var npaBPFErrors = []string{
	"Failed to recover the BPF state", "BPF State Recovery failed", "failed to recover global maps",
	"got err for ingress in-mem map", "got err for egress in-mem map",
	"got err for cluster policy ingress in-mem map", "got err for cluster policy egress in-mem map",
}

// unitDirs are where systemd looks for unit files, and their .wants
// directories for enabled units.
var unitDirs = []string{"etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"}

// npaDeployment says how the agent is deployed here, if at all.
type npaDeployment string

const (
	npaNone    npaDeployment = ""
	npaPod     npaDeployment = "pod"
	npaSystemd npaDeployment = "systemd"
)

// npaObservation is what one check sees of the network policy agent.
type npaObservation struct {
	Deployment npaDeployment
	// Running, with Where ("kube-system/aws-node-x7k2p" or the unit) and,
	// when not running, State (the container's waiting reason, ...).
	Running bool
	Where   string
	State   string
	// Restarts is the container's restart count (pod), or the unit's main
	// PID (systemd: a new PID is a restart).
	Restarts int32
	PID      int
	// BPFErrors are the times of BPF recovery error lines read by this check.
	BPFErrors []time.Time
	LastBPF   string
}

// npaState is the check's memory.
type npaState struct {
	deployment npaDeployment
	notRunning time.Time
	// counts are (time, restart count) samples of the last window; pids the
	// times the systemd unit's process changed.
	counts  []countSample
	lastPID int
	pidNew  []time.Time
	bpf     []time.Time
	lastBPF string
}

type countSample struct {
	at    time.Time
	count int32
}

func (m *Monitor) runNPA(ctx context.Context) ([]detection.Finding, error) {
	obs, err := gather(ctx, m, &m.npaGuard, "network policy agent state", m.readNPA)
	if err != nil {
		return nil, err
	}
	thr := npaThresholds{
		NotRunning: m.secondsThreshold(health.ReasonNPANotRunning),
		Restarts:   m.countThreshold(health.ReasonNPARepeatedlyRestart),
		BPFErrors:  m.countThreshold(health.ReasonNPABPFRecoveryError),
	}
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.npa, fs = evalNPA(m.npa, obs, thr, now)
	return fs, nil
}

// readNPA finds the agent and reads its state and its new log lines. The
// PID cache and the log tail are touched only here, inside the guarded
// gatherer.
func (m *Monitor) readNPA() (npaObservation, error) {
	var o npaObservation
	if m.opts.Pods != nil {
		pods, err := m.opts.Pods()
		if err != nil {
			return o, err
		}
		o = npaFromPods(pods)
	}
	if o.Deployment == npaNone && m.unitEnabled(npaUnit) {
		o.Deployment, o.Where = npaSystemd, npaUnit
		m.npaPID = unitPID(m.hostPath("proc"), npaUnit, m.npaPID)
		o.PID, o.Running = m.npaPID, m.npaPID > 0
		if !o.Running {
			o.State = "no process in the unit's cgroup"
		}
	}
	if o.Deployment == npaNone {
		m.npaLog.Reset()
		return o, nil
	}
	err := m.npaLog.Read(m.hostPath(npaLogPath), func(line []byte) {
		if ts, msg, ok := parseZapLine(line, npaBPFErrors); ok {
			o.BPFErrors = append(o.BPFErrors, ts)
			o.LastBPF = msg
		}
	})
	return o, err
}

// npaFromPods finds the aws-eks-nodeagent container of this node's aws-node
// pod.
func npaFromPods(pods []*corev1.Pod) npaObservation {
	for _, p := range pods {
		if p.Namespace != "kube-system" || !strings.HasPrefix(p.Name, "aws-node-") || p.DeletionTimestamp != nil {
			continue
		}
		if !slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == npaContainer }) {
			continue
		}
		o := npaObservation{Deployment: npaPod, Where: p.Namespace + "/" + p.Name, State: "not started"}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != npaContainer {
				continue
			}
			o.Restarts = cs.RestartCount
			switch {
			case cs.State.Running != nil:
				o.Running, o.State = true, ""
			case cs.State.Waiting != nil:
				o.State = "waiting: " + cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				o.State = fmt.Sprintf("terminated: %s (exit code %d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
			}
		}
		return o
	}
	return npaObservation{}
}

// unitEnabled reports whether a unit file exists and is enabled (linked
// from some target's .wants directory).
func (m *Monitor) unitEnabled(unit string) bool {
	exists := false
	for _, d := range unitDirs {
		if _, err := os.Stat(m.hostPath(filepath.Join(d, unit))); err == nil {
			exists = true
			break
		}
	}
	if !exists {
		return false
	}
	for _, d := range unitDirs {
		wants, _ := filepath.Glob(m.hostPath(filepath.Join(d, "*.wants", unit)))
		if len(wants) > 0 {
			return true
		}
	}
	return false
}

// unitPID returns a process of the systemd unit: one whose cgroup is the
// unit's (cgroup v2 "0::/system.slice/UNIT", v1 "1:name=systemd:/...").
// last is checked first; otherwise /proc is scanned. 0: none.
func unitPID(procDir, unit string, last int) int {
	if last > 0 && inUnit(procDir, strconv.Itoa(last), unit) {
		return last
	}
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 && inUnit(procDir, e.Name(), unit) {
			return pid
		}
	}
	return 0
}

func inUnit(procDir, pid, unit string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, pid, "cgroup"))
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if i := bytes.LastIndexByte(line, ':'); i >= 0 {
			path := line[i+1:]
			if bytes.HasSuffix(path, []byte("/"+unit)) || bytes.Contains(path, []byte("/"+unit+"/")) {
				return true
			}
		}
	}
	return false
}

// parseZapLine reads a zap JSON line (ipamd.log, network-policy-agent.log)
// that mentions one of wanted; other lines are skipped before decoding.
func parseZapLine(line []byte, wanted []string) (time.Time, string, bool) {
	if !slices.ContainsFunc(wanted, func(w string) bool { return bytes.Contains(line, []byte(w)) }) {
		return time.Time{}, "", false
	}
	ts, msg, ok := decodeZap(line)
	if !ok || !slices.ContainsFunc(wanted, func(w string) bool { return strings.Contains(msg, w) }) {
		return time.Time{}, "", false
	}
	return ts, msg, true
}

type npaThresholds struct {
	NotRunning          time.Duration
	Restarts, BPFErrors int
}

// evalNPA reports NPANotRunning once the deployed agent has not been running
// for the threshold, NPARepeatedlyRestart while it restarted at least the
// threshold within the last hour, and NPABPFRecoveryError while at least
// the threshold of BPF recovery errors were logged within the last hour. A
// node where it is not deployed forgets everything.
func evalNPA(prev npaState, o npaObservation, thr npaThresholds, now time.Time) (npaState, []detection.Finding) {
	next := prev
	if o.Deployment == npaNone || o.Deployment != prev.deployment {
		next = npaState{}
	}
	next.deployment = o.Deployment
	if o.Deployment == npaNone {
		return next, nil
	}
	var fs []detection.Finding
	if o.Running {
		next.notRunning = time.Time{}
	} else {
		if next.notRunning.IsZero() {
			next.notRunning = now
		}
		if now.Sub(next.notRunning) >= thr.NotRunning {
			fs = append(fs, detection.Finding{
				Reason: health.ReasonNPANotRunning,
				Message: fmt.Sprintf("the network policy agent (%s) has not been running since %s (%s): network policies are not enforced or updated",
					o.Where, next.notRunning.UTC().Format(time.RFC3339), o.State),
				Observed: now, Subject: o.Where,
			})
		}
	}

	restarts := 0
	switch o.Deployment {
	case npaPod:
		next.counts = append(slices.DeleteFunc(slices.Clone(next.counts), func(s countSample) bool {
			return now.Sub(s.at) > npaWindow || s.count > o.Restarts // a new pod counts from zero
		}), countSample{at: now, count: o.Restarts})
		restarts = int(o.Restarts - next.counts[0].count)
	case npaSystemd:
		if o.PID > 0 {
			if next.lastPID > 0 && o.PID != next.lastPID {
				next.pidNew = append(next.pidNew, now)
			}
			next.lastPID = o.PID
		}
		next.pidNew = slices.DeleteFunc(slices.Clone(next.pidNew), func(t time.Time) bool { return now.Sub(t) > npaWindow })
		restarts = len(next.pidNew)
	}
	if restarts >= thr.Restarts {
		fs = append(fs, detection.Finding{
			Reason:   health.ReasonNPARepeatedlyRestart,
			Message:  fmt.Sprintf("the network policy agent (%s) restarted %d times within the last hour (threshold %d): policy enforcement is disrupted", o.Where, restarts, thr.Restarts),
			Observed: now, Subject: o.Where,
		})
	}

	for _, t := range o.BPFErrors {
		if t.IsZero() {
			t = now
		}
		next.bpf = append(next.bpf, t)
	}
	if o.LastBPF != "" {
		next.lastBPF = o.LastBPF
	}
	next.bpf = slices.DeleteFunc(slices.Clone(next.bpf), func(t time.Time) bool { return now.Sub(t) > npaWindow })
	if len(next.bpf) >= thr.BPFErrors {
		fs = append(fs, detection.Finding{
			Reason: health.ReasonNPABPFRecoveryError,
			Message: fmt.Sprintf("the network policy agent (%s) logged %d BPF recovery errors within the last hour (threshold %d); the last: %s",
				o.Where, len(next.bpf), thr.BPFErrors, oneLine([]byte(next.lastBPF))),
			Observed: now, Subject: o.Where,
		})
	}
	return next, fs
}
