package explain

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// requestFindings explains containers without cpu or memory requests. The
// scheduler and Karpenter place pods by their requests only (Karpenter
// bin-packs new nodes by them), so a pod that asks for nothing is counted
// as using nothing: nodes fill with more than they can run, and the pods
// are CPU-throttled, OOM-killed or evicted. A LimitRange's defaultRequest
// fills in requests for pods created in its namespace after it.
func requestFindings(in PodInput) []Finding {
	p := in.Pod
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var missing []string
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		var lacks []string
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				lacks = append(lacks, string(r))
			}
		}
		if len(lacks) > 0 {
			missing = append(missing, fmt.Sprintf("container %s has no %s request", c.Name, strings.Join(lacks, " and ")))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	f := Finding{
		Cause: fmt.Sprintf("%d container(s) have no cpu or memory requests: the scheduler and Karpenter count what they do not request as nothing, "+
			"so nodes get more pods than they can run (CPU throttling, OOM kills, evictions)", len(missing)),
		Evidence: missing,
		Source:   "pod spec",
	}
	f.Evidence = append(f.Evidence, limitRangeText(in.Pod.Namespace, in.LimitRanges)...)
	f.Fix = "set resources.requests on every container from measured usage (`kubectl top pod --containers`); for the namespace's defaults, a LimitRange, " +
		"which fills in requests of pods created after it: {apiVersion: v1, kind: LimitRange, metadata: {name: defaults, namespace: " + in.Pod.Namespace + "}, " +
		"spec: {limits: [{type: Container, defaultRequest: {cpu: 100m, memory: 128Mi}, default: {memory: 512Mi}}]}}"
	return []Finding{f}
}

// limitRangeText says what the namespace's LimitRanges do for requests.
func limitRangeText(ns string, lrs []corev1.LimitRange) []string {
	if lrs == nil {
		return []string{"the LimitRanges of namespace " + ns + " could not be read"}
	}
	var out []string
	for _, lr := range lrs {
		for _, l := range lr.Spec.Limits {
			if l.Type != corev1.LimitTypeContainer || len(l.DefaultRequest) == 0 {
				continue
			}
			var parts []string
			for r, q := range l.DefaultRequest {
				parts = append(parts, string(r)+"="+q.String())
			}
			sort.Strings(parts)
			out = append(out, fmt.Sprintf("LimitRange %s/%s sets default requests %s for containers created after it: this pod predates it, or its containers ask for other resources only",
				ns, lr.Name, strings.Join(parts, ", ")))
		}
	}
	if len(out) == 0 {
		out = append(out, "namespace "+ns+" has no LimitRange with a container defaultRequest")
	}
	return out
}
