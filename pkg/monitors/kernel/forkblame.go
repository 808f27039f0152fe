package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// A host daemon that cannot fork (ForkFailedOutOfPIDs from the journal)
// may be a node fault — its unit's TasksMax, a leak in the daemon, a
// kernel.pid_max set too low — or the node's pods may have taken its
// tasks: without the kubelet's podPidsLimit, one unprivileged pod's fork
// bomb exhausts kernel.pid_max and every host daemon fails to fork. That
// node is not broken whatever runs on it: it recovers when the pod goes,
// and condemning it would let a tenant walk repairs across a pool. So the
// journal's fork failures are judged by who holds the node's tasks when
// the line is read: when the pods' cgroup holds more than half of them the
// finding is PodsExhaustedPIDs, a Warning (the kubelet's PID limits and
// eviction own that case), else ForkFailedOutOfPIDs. The kernel's own
// "fork rejected by pids controller" lines name the cgroup that hit its
// limit and need no judging: the pods' cgroups are excluded by the rule.

// kubepodsPids are the pids.current files of the pods' parent cgroup,
// relative to the host root: cgroup v2 with the systemd and the cgroupfs
// driver, then cgroup v1's pids hierarchy with both drivers.
var kubepodsPids = []string{
	"sys/fs/cgroup/kubepods.slice/pids.current",
	"sys/fs/cgroup/kubepods/pids.current",
	"sys/fs/cgroup/pids/kubepods.slice/pids.current",
	"sys/fs/cgroup/pids/kubepods/pids.current",
}

// taskHolders is who holds the node's tasks (processes and threads).
type taskHolders struct {
	Pods, Total uint64
}

// readTaskHolders reads the pods' cgroup's task count and the node's
// (/proc/loadavg). ok is false when either cannot be read (no pids
// controller, a kubelet with another cgroup root): the failure is then
// judged as before, a node fault.
func (m *Monitor) readTaskHolders() (h taskHolders, ok bool) {
	data, err := os.ReadFile(filepath.Join(m.procDir(), "loadavg"))
	if err != nil {
		return h, false
	}
	if h.Total, err = parseLoadavgTasks(data); err != nil {
		return h, false
	}
	for _, rel := range kubepodsPids {
		data, err := os.ReadFile(filepath.Join(m.env.HostRoot, rel))
		if err != nil {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return h, false
		}
		h.Pods = n
		return h, true
	}
	return h, false
}

// podsHoldMost reports whether the pods hold more than half of the node's
// tasks.
func (h taskHolders) podsHoldMost() bool { return h.Total > 0 && h.Pods > h.Total/2 }

// blameForkFailure turns a journal fork failure into PodsExhaustedPIDs when
// the pods hold most of the node's tasks. f is the ForkFailedOutOfPIDs
// finding made of the line.
func blameForkFailure(f detection.Finding, h taskHolders, known bool) detection.Finding {
	if !known || !h.podsHoldMost() {
		return f
	}
	f.Reason = health.ReasonPodsExhaustedPIDs
	f.Message = fmt.Sprintf("pods hold %d of the node's %d tasks: the workloads exhausted its PIDs (the kubelet's podPidsLimit bounds a pod) — %s",
		h.Pods, h.Total, f.Message)
	return f
}

// judgedByHolders says whether a match is a fork failure to judge: one of
// the journal's (the kernel's lines name their cgroup).
func judgedByHolders(match logline.Match) bool {
	return match.Reason == health.ReasonForkFailedOutOfPIDs && match.Line.Source == logline.Journal
}
