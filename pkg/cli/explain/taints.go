package explain

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Taints that mean "not initialized yet": put on at creation by the cloud
// provider, Karpenter or an agent, and removed when it is ready. Sources:
// Kubernetes well-known taints (node.kubernetes.io/not-ready, .../
// unreachable, node.cloudprovider.kubernetes.io/uninitialized), Karpenter
// (karpenter.sh/unregistered until the node registers; NodePool
// startupTaints), and the usual agents' readiness taints (Cilium
// node.cilium.io/agent-not-ready, the AWS EBS/EFS CSI node agents'
// *.csi.aws.com/agent-not-ready).
var startupTaints = []string{
	"node.cloudprovider.kubernetes.io/uninitialized",
	"karpenter.sh/unregistered",
	"node.cilium.io/agent-not-ready",
	"ebs.csi.aws.com/agent-not-ready",
	"efs.csi.aws.com/agent-not-ready",
}

// IsStartupTaint reports whether key is a known initialization taint.
func IsStartupTaint(key string) bool {
	for _, k := range startupTaints {
		if k == key {
			return true
		}
	}
	return strings.HasSuffix(key, "/agent-not-ready") || strings.HasSuffix(key, "/not-initialized")
}

// taintClass explains a taint key: what it means, and the fix for a pod
// that does not tolerate it.
func taintClass(key string) (meaning, fix string) {
	switch {
	case key == "nodemend.dev/repair":
		return "under repair by nodemend (tainted while it drains before replacement)",
			"nothing: the pod lands on the replacement or another node; if every node of the pool is under repair, see `kubectl mend status`"
	case key == corev1.TaintNodeNotReady || key == corev1.TaintNodeUnreachable:
		return "NotReady or unreachable (taint added by the node lifecycle controller)",
			"find out why the kubelet does not report Ready: `kubectl mend explain node/NAME`, `kubectl mend logs NODE`"
	case key == corev1.TaintNodeUnschedulable:
		return "cordoned", "uncordon the nodes (`kubectl uncordon NODE`) if the cordon is no longer wanted"
	case key == corev1.TaintNodeDiskPressure || key == corev1.TaintNodeMemoryPressure || key == corev1.TaintNodePIDPressure:
		return "under resource pressure (the kubelet is evicting pods)", "free the resource on those nodes or add nodes; the kubelet removes the taint when pressure ends"
	case key == "karpenter.sh/disrupted":
		return "being disrupted by Karpenter (consolidation, drift, expiry)", "nothing: the node is going away and Karpenter provisions for displaced pods"
	case IsStartupTaint(key):
		return "not initialized yet (startup taint still present)",
			"wait for the component that removes it; if it stays, that component is failing on the node (cloud controller manager, CNI or CSI agent, Karpenter registration)"
	}
	return "dedicated to other workloads", "add a toleration for the taint to the pod, or target other nodes"
}

// parseTaint reads "{key: value}" or "{key}" from a scheduler message.
func parseTaint(s string) (key, value string) {
	i, j := strings.Index(s, "{"), strings.LastIndex(s, "}")
	if i < 0 || j < i {
		return "", ""
	}
	inner := s[i+1 : j]
	key, value, _ = strings.Cut(inner, ": ")
	return strings.TrimSpace(key), strings.TrimSpace(value)
}
