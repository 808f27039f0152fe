package containerruntime

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// The pure halves of the checks: no I/O, no clock; everything they need is an
// argument.

// responsiveness is the state the unresponsive check carries between runs.
type responsiveness struct {
	// Failures counts consecutive failed probes; zero after a success.
	Failures int
	// Since is when the first of them ran.
	Since time.Time
}

// probeResult is what one run of the unresponsive check saw.
type probeResult struct {
	At time.Time
	// Err is nil when the runtime answered every probe call; else the first
	// failure, naming the call ("Version: rpc error: ...").
	Err error
}

// evalUnresponsive advances the consecutive-failure count with one probe and
// reports ContainerRuntimeUnresponsive once it reaches threshold. One success
// resets it. The message stays the same while the failure lasts (unless the
// error changes), so the condition is not rewritten on every check.
func evalUnresponsive(prev responsiveness, p probeResult, threshold int, socket string) (responsiveness, []detection.Finding) {
	if p.Err == nil {
		return responsiveness{}, nil
	}
	next := prev
	next.Failures++
	if next.Failures == 1 {
		next.Since = p.At
	}
	if next.Failures < threshold {
		return next, nil
	}
	return next, []detection.Finding{{
		Reason: health.ReasonContainerRuntimeUnresponsive,
		Message: fmt.Sprintf("container runtime on %s has failed every CRI health check since %s (threshold %d consecutive checks): %v",
			socket, next.Since.UTC().Format(time.RFC3339), threshold, p.Err),
		Observed: p.At,
	}}
}

// overduePod is a pod of this node past its deletion deadline.
type overduePod struct {
	Key string // namespace/name
	UID string
	// Deletion is the pod's deletionTimestamp: when the kubelet should have
	// finished killing it (the API server sets it to request time + grace).
	Deletion time.Time
	// Overdue is how long ago Deletion was.
	Overdue time.Duration
}

// overduePods returns the pods bound to nodeName whose deletionTimestamp +
// threshold is before now, sorted by namespace/name. Pods bound to another node
// (or to none) are ignored whatever the lister returns; an empty nodeName
// accepts every bound pod. The grace period is not added again: it is already
// in the deletionTimestamp.
func overduePods(now time.Time, pods []*corev1.Pod, nodeName string, threshold time.Duration) []overduePod {
	var out []overduePod
	for _, p := range pods {
		if p == nil || p.DeletionTimestamp == nil || p.Spec.NodeName == "" ||
			nodeName != "" && p.Spec.NodeName != nodeName {
			continue
		}
		del := p.DeletionTimestamp.Time
		if !now.After(del.Add(threshold)) {
			continue
		}
		out = append(out, overduePod{
			Key:      p.Namespace + "/" + p.Name,
			UID:      string(p.UID),
			Deletion: del,
			Overdue:  now.Sub(del),
		})
	}
	slices.SortFunc(out, func(a, b overduePod) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// podUsage is what the runtime still has for one pod UID.
type podUsage struct {
	Containers   []string // names of running containers
	SandboxReady bool
}

// runtimeUsage indexes running containers and ready sandboxes by pod UID.
// Entries in another state are ignored even if the runtime did not honour the
// state filter. A container without the pod UID label is attributed through
// its sandbox.
func runtimeUsage(containers []*runtimeapi.Container, sandboxes []*runtimeapi.PodSandbox) map[string]*podUsage {
	use := map[string]*podUsage{}
	get := func(uid string) *podUsage {
		u := use[uid]
		if u == nil {
			u = &podUsage{}
			use[uid] = u
		}
		return u
	}
	sandboxUID := map[string]string{}
	for _, sb := range sandboxes {
		uid := sb.GetMetadata().GetUid()
		if uid == "" {
			uid = sb.GetLabels()[labelPodUID]
		}
		if uid == "" {
			continue
		}
		sandboxUID[sb.GetId()] = uid
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			get(uid).SandboxReady = true
		}
	}
	for _, c := range containers {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		uid := c.GetLabels()[labelPodUID]
		if uid == "" {
			uid = sandboxUID[c.GetPodSandboxId()]
		}
		if uid == "" {
			continue
		}
		name := c.GetMetadata().GetName()
		if name == "" {
			name = c.GetLabels()[labelContainerName]
		}
		if name == "" {
			name = c.GetId()
		}
		u := get(uid)
		u.Containers = append(u.Containers, name)
	}
	for _, u := range use {
		slices.Sort(u.Containers)
	}
	return use
}

// evalStuck reports PodStuckTerminating for each overdue pod the runtime still
// runs (a running container or a ready sandbox), one finding per pod.
func evalStuck(now time.Time, threshold time.Duration, overdue []overduePod, use map[string]*podUsage) []detection.Finding {
	var out []detection.Finding
	for _, p := range overdue {
		u := use[p.UID]
		if u == nil || len(u.Containers) == 0 && !u.SandboxReady {
			continue
		}
		var still string
		switch {
		case len(u.Containers) > 0 && u.SandboxReady:
			still = fmt.Sprintf("running containers [%s] and a ready sandbox", strings.Join(u.Containers, " "))
		case len(u.Containers) > 0:
			still = fmt.Sprintf("running containers [%s]", strings.Join(u.Containers, " "))
		default:
			still = "a ready sandbox"
		}
		out = append(out, detection.Finding{
			Reason: health.ReasonPodStuckTerminating,
			// The message names the deadline, not how overdue the pod is now, so
			// it stays the same from check to check and the condition is not
			// rewritten every period.
			Message: fmt.Sprintf("pod %s is stuck terminating: more than %s past its deletion deadline %s, but the container runtime still reports %s",
				p.Key, threshold, p.Deletion.UTC().Format(time.RFC3339), still),
			Observed: now,
			Subject:  p.Key,
		})
	}
	return out
}

// Labels the kubelet sets on sandboxes and containers.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)
