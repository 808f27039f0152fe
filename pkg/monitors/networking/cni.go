package networking

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
