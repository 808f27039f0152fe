package networking

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/source/tail"
)

// cniSpec is how the monitor recognizes one CNI and its agent. A CNI is
// installed when one of its configuration files is in /etc/cni/net.d (the
// agent writes it there when it first starts, and it stays); then its agent
// process must run.
type cniSpec struct {
	Name string
	// Configs are the file names it writes in /etc/cni/net.d.
	Configs []string
	// Agent is the agent's process name (/proc/PID/comm, at most 15 bytes).
	Agent string
	// NotRunning and NotReady are its reasons: the VPC CNI has its own (the
	// EKS Node Monitoring Agent's IPAMD* strings), the others share generic ones.
	NotRunning, NotReady string
	// Readiness is how readiness is read; "" means it is not.
	Readiness readinessKind
}

type readinessKind string

const (
	readinessIPAMDLog readinessKind = "ipamd-log"
	readinessCilium   readinessKind = "cilium-healthz"
	readinessFelix    readinessKind = "felix-readiness"
)

// Where the readiness signals are, as host paths and addresses.
const (
	// ipamdLogPath is the VPC CNI's IPAM daemon log (JSON lines, rotated by
	// renaming).
	ipamdLogPath = "var/log/aws-routed-eni/ipamd.log"
	// ciliumSocketPath is cilium-agent's API socket; GET /v1/healthz answers
	// its status, including whether it reaches the API server.
	ciliumSocketPath = "var/run/cilium/cilium.sock"
	// felixReadinessAddr is calico-node's Felix health endpoint
	// (FELIX_HEALTHPORT default 9099, bound to localhost).
	felixReadinessAddr = "127.0.0.1:9099"
)

// cniSpecs are the CNIs the monitor knows. Canal is Calico policy over
// Flannel: calico-node is its agent.
func cniSpecs() []cniSpec {
	return []cniSpec{
		{Name: "aws-vpc-cni", Configs: []string{"10-aws.conflist"}, Agent: "aws-k8s-agent",
			NotRunning: health.ReasonIPAMDNotRunning, NotReady: health.ReasonIPAMDNotReady, Readiness: readinessIPAMDLog},
		{Name: "cilium", Configs: []string{"05-cilium.conflist", "05-cilium.conf"}, Agent: "cilium-agent",
			NotRunning: health.ReasonCNIAgentNotRunning, NotReady: health.ReasonCNIAgentNotReady, Readiness: readinessCilium},
		{Name: "calico", Configs: []string{"10-calico.conflist", "10-canal.conflist"}, Agent: "calico-node",
			NotRunning: health.ReasonCNIAgentNotRunning, NotReady: health.ReasonCNIAgentNotReady, Readiness: readinessFelix},
		{Name: "flannel", Configs: []string{"10-flannel.conflist"}, Agent: "flanneld",
			NotRunning: health.ReasonCNIAgentNotRunning, NotReady: health.ReasonCNIAgentNotReady},
	}
}

// cniObservation is what one check saw of one installed CNI.
type cniObservation struct {
	Spec   cniSpec
	Config string // the configuration file that says it is installed
	PID    int    // 0: the agent process is not running
	// NotReady is set when the readiness signal says so, with Detail. For
	// the IPAMD log, NotReadySince is when the log says the failure began;
	// otherwise the check's own observations date it.
	NotReady      bool
	NotReadySince time.Time
	Detail        string
	// IPAMDStarts and IPAMDNoIPs are what the VPC CNI's log said: how many
	// times IPAMD started within the last hour, and its last "no address"
	// message since the previous check.
	IPAMDStarts []time.Time
	IPAMDNoIPs  string
}

// cniReader is the gatherer's own state: it is only touched inside the
// guarded gatherer, never concurrently.
type cniReader struct {
	pids  map[string]int // last PID of each agent: checked first next time
	ipamd tail.Cursor    // ipamd.log, read on from where the last check left it
	log   ipamdLog
}

func (m *Monitor) runCNI(ctx context.Context) ([]detection.Finding, error) {
	obs, err := gather(ctx, m, &m.cniGuard, "CNI agent detection", func() ([]cniObservation, error) {
		return m.readCNI(ctx)
	})
	if err != nil {
		return nil, err
	}
	thr := func(reason string) time.Duration { return m.secondsThreshold(reason) }
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []detection.Finding
	m.cni.eval, fs = evalCNI(m.cni.eval, obs, thr, now)
	return append(fs, evalIPAMDEvents(obs, m.countThreshold(health.ReasonIPAMDRepeatedlyRestart), now)...), nil
}

// evalIPAMDEvents reports what the VPC CNI's log said since the previous
// check: IPAMDNoIPs when IPAMD had no address to give, and
// IPAMDRepeatedlyRestart while it started at least restarts times within
// the last hour.
func evalIPAMDEvents(obs []cniObservation, restarts int, now time.Time) []detection.Finding {
	var fs []detection.Finding
	for _, o := range obs {
		if o.Spec.Readiness != readinessIPAMDLog {
			continue
		}
		if o.IPAMDNoIPs != "" {
			fs = append(fs, detection.Finding{
				Reason:   health.ReasonIPAMDNoIPs,
				Message:  "IPAMD has no IP address for new pods, which stay in ContainerCreating: ipamd.log: " + oneLine([]byte(o.IPAMDNoIPs)),
				Observed: now,
				Subject:  o.Spec.Name,
			})
		}
		var recent int
		for _, t := range o.IPAMDStarts {
			if now.Sub(t) <= restartWindow {
				recent++
			}
		}
		if recent >= restarts {
			fs = append(fs, detection.Finding{
				Reason:   health.ReasonIPAMDRepeatedlyRestart,
				Message:  fmt.Sprintf("IPAMD started %d times within the last hour (threshold %d): pod networking on the node flaps with it", recent, restarts),
				Observed: now,
				Subject:  o.Spec.Name,
			})
		}
	}
	return fs
}

// cniState is the monitor's CNI state: the gatherer's reader and the
// evaluation's memory.
type cniState struct {
	reader cniReader
	eval   cniEval
}

func (m *Monitor) readCNI(ctx context.Context) ([]cniObservation, error) {
	confs, err := cniConfigs(m.hostPath(cniConfDir))
	if err != nil {
		return nil, err
	}
	r := &m.cni.reader // only this gatherer touches it
	if r.pids == nil {
		r.pids = map[string]int{}
	}
	var obs []cniObservation
	var needScan []string
	r.log.NoIPs = "" // a message is news for one check only
	installed := installedCNIs(confs)
	for _, o := range installed {
		if pid := r.pids[o.Spec.Agent]; pid > 0 && commIs(m.hostPath("proc"), pid, o.Spec.Agent) {
			continue
		}
		needScan = append(needScan, o.Spec.Agent)
	}
	if len(needScan) > 0 {
		found, err := findProcesses(m.hostPath("proc"), needScan)
		if err != nil {
			return nil, err
		}
		for _, name := range needScan {
			r.pids[name] = found[name]
		}
	}
	for _, o := range installed {
		o.PID = r.pids[o.Spec.Agent]
		if o.PID > 0 {
			if err := m.readReadiness(ctx, r, &o); err != nil {
				return nil, err
			}
		}
		obs = append(obs, o)
	}
	if !slices.ContainsFunc(installed, func(o cniObservation) bool { return o.Spec.Readiness == readinessIPAMDLog }) {
		r.ipamd.Reset()
		r.log = ipamdLog{}
	}
	return obs, nil
}

// installedCNIs returns the known CNIs that have a configuration among confs.
func installedCNIs(confs []string) []cniObservation {
	var out []cniObservation
	for _, s := range cniSpecs() {
		for _, c := range s.Configs {
			if slices.Contains(confs, c) {
				out = append(out, cniObservation{Spec: s, Config: c})
				break
			}
		}
	}
	return out
}

// readReadiness fills o's readiness from its CNI's signal. A signal that
// cannot be read (no endpoint, no log yet) leaves o ready: not running is
// the other reason's business, and guessing is worse than not knowing.
func (m *Monitor) readReadiness(ctx context.Context, r *cniReader, o *cniObservation) error {
	switch o.Spec.Readiness {
	case readinessIPAMDLog:
		var lines [][]byte
		if err := r.ipamd.Read(m.hostPath(ipamdLogPath), func(line []byte) { lines = append(lines, bytes.Clone(line)) }); err != nil {
			return err
		}
		r.log = evalIPAMDLog(r.log, lines)
		o.IPAMDStarts, o.IPAMDNoIPs = slices.Clone(r.log.Starts), r.log.NoIPs
		if !r.log.FailingSince.IsZero() {
			o.NotReady, o.NotReadySince, o.Detail = true, r.log.FailingSince, "ipamd.log: "+r.log.LastError
		}
	case readinessCilium:
		res, err := httpGet(ctx, "unix", m.hostPath(ciliumSocketPath), "/v1/healthz", m.opts.ProbeTimeout)
		if err != nil {
			return nil
		}
		o.NotReady, o.Detail = ciliumNotReady(res)
	case readinessFelix:
		res, err := httpGet(ctx, "tcp", m.felixAddr, "/readiness", m.opts.ProbeTimeout)
		if err != nil {
			return nil
		}
		if res.Status != 200 && res.Status != 204 {
			o.NotReady, o.Detail = true, fmt.Sprintf("felix readiness: HTTP %d %s", res.Status, oneLine(res.Body))
		}
	}
	return nil
}

// ciliumNotReady reads cilium-agent's status (models.StatusResponse): the
// agent is not ready when its Kubernetes connectivity state is Failure.
func ciliumNotReady(res httpResult) (bool, string) {
	var st struct {
		Kubernetes *struct {
			State string `json:"state"`
			Msg   string `json:"msg"`
		} `json:"kubernetes"`
	}
	if err := json.Unmarshal(res.Body, &st); err != nil || st.Kubernetes == nil {
		if res.Status >= 500 {
			return true, fmt.Sprintf("cilium /v1/healthz: HTTP %d %s", res.Status, oneLine(res.Body))
		}
		return false, ""
	}
	if st.Kubernetes.State == "Failure" {
		return true, "cilium-agent cannot reach the API server: " + st.Kubernetes.Msg
	}
	return false, ""
}

// oneLine shortens a response body for a message.
func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// commIs reports whether /proc/<pid>/comm is name.
func commIs(procDir string, pid int, name string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "comm"))
	return err == nil && strings.TrimSuffix(string(b), "\n") == name
}

// findProcesses scans procDir once for processes whose comm is one of names
// and returns a PID for each found. Processes that exit during the scan are
// skipped.
func findProcesses(procDir string, names []string) (map[string]int, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	found := map[string]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil {
			continue // exited meanwhile, or a kernel thread racing us
		}
		comm := strings.TrimSuffix(string(b), "\n")
		if slices.Contains(names, comm) && found[comm] == 0 {
			found[comm] = pid
			if len(found) == len(names) {
				break
			}
		}
	}
	return found, nil
}

// --- pure evaluation ---------------------------------------------------------

// cniEval is what the CNI evaluation remembers between checks.
type cniEval struct {
	// missingSince is when each installed CNI's agent was first seen not
	// running; notReadySince when it was first seen not ready.
	missingSince  map[string]time.Time
	notReadySince map[string]time.Time
}

// evalCNI reports, for each installed CNI, its NotRunning reason when the
// agent has not been running for at least its threshold, and its NotReady
// reason when the agent runs but has not been ready for at least its
// threshold. A CNI that is not installed is not a fault and is forgotten.
// Messages name when the fault began, not how long it lasts, so that a
// standing fault does not rewrite the condition on every check.
func evalCNI(prev cniEval, obs []cniObservation, thr func(string) time.Duration, now time.Time) (cniEval, []detection.Finding) {
	next := cniEval{missingSince: map[string]time.Time{}, notReadySince: map[string]time.Time{}}
	var fs []detection.Finding
	for _, o := range obs {
		name := o.Spec.Name
		if o.PID == 0 {
			since, ok := prev.missingSince[name]
			if !ok {
				since = now
			}
			next.missingSince[name] = since
			if d := now.Sub(since); d >= thr(o.Spec.NotRunning) {
				fs = append(fs, detection.Finding{
					Reason: o.Spec.NotRunning,
					Message: fmt.Sprintf("%s is installed (/etc/cni/net.d/%s) but its agent %s has not been running since %s: pods on this node get no network",
						name, o.Config, o.Spec.Agent, since.UTC().Format(time.RFC3339)),
					Observed: now,
					Subject:  name,
				})
			}
			continue
		}
		if !o.NotReady {
			continue
		}
		since := o.NotReadySince
		if since.IsZero() {
			var ok bool
			if since, ok = prev.notReadySince[name]; !ok {
				since = now
			}
		}
		next.notReadySince[name] = since
		if d := now.Sub(since); d >= thr(o.Spec.NotReady) {
			fs = append(fs, detection.Finding{
				Reason: o.Spec.NotReady,
				Message: fmt.Sprintf("%s agent %s has not been ready since %s: %s",
					name, o.Spec.Agent, since.UTC().Format(time.RFC3339), o.Detail),
				Observed: now,
				Subject:  name,
			})
		}
	}
	return next, fs
}

// --- IPAMD log ---------------------------------------------------------------

// ipamdLog is what the IPAMD log says about API server connectivity.
type ipamdLog struct {
	// FailingSince is the time of the first failure line not followed by a
	// successful connection; zero when connected (or unknown).
	FailingSince time.Time
	LastError    string
	// Starts are the times of IPAMD's start lines within the last
	// restartWindow of the newest one.
	Starts []time.Time
	// NoIPs is the last "no address" message of the latest read; it is
	// cleared by each read (a new check).
	NoIPs string
}

// restartWindow is the window IPAMDRepeatedlyRestart counts starts in.
const restartWindow = time.Hour

// Messages of the VPC CNI (pkg/k8sapi CheckAPIServerConnectivity and
// cmd/aws-k8s-agent): a failed connectivity test, and the line that follows
// a successful one.
var (
	ipamdFailures = []string{"Unable to reach API Server", "Failed to check API server connectivity", "error communicating with apiserver"}
	ipamdSuccess  = "Successful communication with the Cluster"
	// ipamdStart begins every IPAMD run (cmd/aws-k8s-agent/main.go:
	// "Starting L-IPAMD %s  ...").
	ipamdStart = "Starting L-IPAMD"
	// ipamdNoIPs are IPAMD's messages when it has no address for a pod:
	// EC2's error code when the subnet has no free address for a new ENI
	// or secondary IP, and the datastore's own (pkg/ipamd/datastore).
	ipamdNoIPs = []string{"InsufficientFreeAddressesInSubnet", "no available IP/Prefix addresses"}
)

// evalIPAMDLog advances st with new log lines (oldest first).
func evalIPAMDLog(st ipamdLog, lines [][]byte) ipamdLog {
	st.NoIPs = ""
	for _, line := range lines {
		ts, msg, ok := parseIPAMDLine(line)
		if !ok {
			continue
		}
		switch {
		case strings.Contains(msg, ipamdStart):
			if ts.IsZero() {
				continue // a start we cannot place in the window
			}
			st.Starts = append(slices.DeleteFunc(st.Starts, func(t time.Time) bool { return ts.Sub(t) > restartWindow }), ts)
		case slices.ContainsFunc(ipamdNoIPs, func(f string) bool { return strings.Contains(msg, f) }):
			st.NoIPs = msg
		case strings.Contains(msg, ipamdSuccess):
			st.FailingSince, st.LastError = time.Time{}, ""
		case slices.ContainsFunc(ipamdFailures, func(f string) bool { return strings.Contains(msg, f) }):
			if st.FailingSince.IsZero() {
				st.FailingSince = ts
			}
			st.LastError = msg
		}
	}
	return st
}

// parseIPAMDLine reads one line of ipamd.log, zap's JSON encoding:
//
//	{"level":"error","ts":"2024-11-21T19:12:29.123Z","caller":"k8sapi/k8sutils.go:71","msg":"Unable to reach API Server, ..."}
//
// Lines that mention neither a failure nor a success are skipped before any
// JSON decoding: the log is busy and almost every line is about IPs.
func parseIPAMDLine(line []byte) (time.Time, string, bool) {
	return parseZapLine(line, ipamdLiterals)
}

// ipamdLiterals are every message the IPAMD log is read for.
var ipamdLiterals = slices.Concat([]string{ipamdSuccess, ipamdStart}, ipamdFailures, ipamdNoIPs)

// decodeZap reads the time and message of a zap JSON line.
func decodeZap(line []byte) (time.Time, string, bool) {
	var rec struct {
		TS  json.RawMessage `json:"ts"`
		Msg string          `json:"msg"`
	}
	if err := json.Unmarshal(line, &rec); err != nil || rec.Msg == "" {
		return time.Time{}, "", false
	}
	return parseZapTime(rec.TS), rec.Msg, true
}

// parseZapTime reads zap's "ts": an ISO 8601 string (the VPC CNI's
// encoder) or epoch seconds as a number (zap's default). Unknown is zero.
func parseZapTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700", "2006-01-02T15:04:05Z0700"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t
			}
		}
		return time.Time{}
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil && f > 0 && f < 1e11 {
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
	}
	return time.Time{}
}
