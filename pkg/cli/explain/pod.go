package explain

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
)

// PodInput is what explain reads for a pod.
type PodInput struct {
	Pod *corev1.Pod
	// Events are the pod's events, any source.
	Events []eventlog.Event
	// Nodes are all nodes (selectors, extended resources, taints).
	Nodes []corev1.Node
	// Claims are the pod's PersistentVolumeClaims by name, with the
	// StorageClasses they use and the claims' events.
	Claims         map[string]*corev1.PersistentVolumeClaim
	StorageClasses map[string]*storagev1.StorageClass
	ClaimEvents    []eventlog.Event
	// NodeClaims are Karpenter's, when installed.
	NodeClaims []NodeClaim
	// Volumes are the PersistentVolumes bound to the pod's claims, by
	// claim name.
	Volumes map[string]*corev1.PersistentVolume
	// CSIDrivers are the installed CSIDriver objects by name; nil when
	// they could not be read.
	CSIDrivers map[string]bool
	// CSINode is the pod's node's CSINode, if any.
	CSINode *storagev1.CSINode
	// LimitRanges are the pod's namespace's; nil when they could not be
	// read.
	LimitRanges []corev1.LimitRange
	// Karpenter tells whether Karpenter's NodeClaims are served.
	Karpenter bool
}

// Pod explains why a pod is not running (or keeps restarting).
func Pod(in PodInput) Report {
	p := in.Pod
	r := Report{Object: "pod/" + p.Namespace + "/" + p.Name, Summary: podSummary(p)}
	var fs []Finding
	if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
		fs = append(fs, unscheduled(in)...)
	}
	if p.Spec.NodeName != "" {
		fs = append(fs, onNode(in)...)
	}
	fs = append(fs, volumes(in)...)
	fs = append(fs, containers(in)...)
	fs = append(fs, requestFindings(in)...)
	if len(fs) == 0 {
		fs = append(fs, Finding{Cause: "nothing wrong found", Fix: "none needed", Source: "pod status"})
	}
	r.Findings = sortFindings(fs)
	return r
}

func podSummary(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if p.Spec.NodeName != "" {
		s += " on node " + p.Spec.NodeName
	} else {
		s += ", not scheduled"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			s += " (" + c.Reason + ")"
		}
	}
	return s
}

// unscheduled explains a pod without a node: the scheduler's last word,
// Karpenter's, and whatever Karpenter is doing about it.
func unscheduled(in PodInput) []Finding {
	var fs []Finding
	if e, ok := eventlog.Latest(in.Events, eventlog.Scheduler, "FailedScheduling"); ok {
		fs = append(fs, schedulerFindings(in.Pod, in.Nodes, e.Message)...)
	} else {
		for _, c := range in.Pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "nodes are available") {
				fs = append(fs, schedulerFindings(in.Pod, in.Nodes, c.Message)...)
			}
		}
	}
	if e, ok := eventlog.Latest(in.Events, eventlog.Karpenter, "FailedScheduling"); ok && strings.HasPrefix(e.Message, karpenterPrefix) {
		fs = append(fs, karpenterFindings(e.Message)...)
	}
	if e, ok := eventlog.Latest(in.Events, eventlog.Karpenter, "Nominated"); ok {
		f := Finding{Cause: "Karpenter has provisioned for the pod and is waiting for the capacity", Evidence: []string{fmt.Sprintf("karpenter: %q", e.Message)},
			Fix: "wait: a new node usually registers within a minute or two; if it does not, see the NodeClaim findings", Source: eventlog.Karpenter}
		fs = append(fs, f)
		if name := nominee(e.Message); name != "" {
			fs = append(fs, nomineeFindings(in, name)...)
		}
	}
	fs = append(fs, karpenterSelfFindings(in)...)
	if len(fs) == 0 {
		fs = append(fs, Finding{Cause: "no scheduling event yet", Fix: "the scheduler has not tried the pod: check that it runs (and that spec.schedulerName names a running scheduler)", Source: "pod status"})
	}
	return fs
}

// nominee reads Karpenter's Nominated message: "Pod should schedule on:
// nodeclaim/NAME" (v1) or "Pod should schedule on node: NAME" (older).
func nominee(msg string) string {
	if _, after, ok := strings.Cut(msg, "schedule on: "); ok {
		_, name, _ := strings.Cut(strings.TrimSpace(after), "/")
		return name
	}
	if _, after, ok := strings.Cut(msg, "schedule on node: "); ok {
		return strings.TrimSpace(after)
	}
	return ""
}

func nomineeFindings(in PodInput, name string) []Finding {
	for _, nc := range in.NodeClaims {
		if nc.Name == name || nc.NodeName == name {
			fs := launchFindings([]NodeClaim{nc})
			if nc.NodeName != "" {
				if n := findNode(in.Nodes, nc.NodeName); n != nil {
					fs = append(fs, notInitialized(n)...)
				}
			}
			return fs
		}
	}
	if n := findNode(in.Nodes, name); n != nil {
		return notInitialized(n)
	}
	return nil
}

func findNode(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

// notInitialized reports startup taints and a kubelet that is not Ready.
func notInitialized(n *corev1.Node) []Finding {
	var fs []Finding
	var startup []string
	for _, t := range n.Spec.Taints {
		if IsStartupTaint(t.Key) {
			startup = append(startup, t.ToString())
		}
	}
	if len(startup) > 0 {
		fs = append(fs, Finding{Cause: "node " + n.Name + " is not initialized: startup taints are still present",
			Evidence: []string{"taints: " + strings.Join(startup, ", ")},
			Fix:      "each taint is removed by the component it names when it is ready on the node (cloud controller manager, CNI agent, CSI node agent, Karpenter registration); check that component's pod on the node",
			Source:   "node", Blocking: true})
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			fs = append(fs, Finding{Cause: "node " + n.Name + " is not Ready",
				Evidence: []string{fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)},
				Fix:      "see `kubectl mend explain node/" + n.Name + "`; a node that never becomes Ready is usually a kubelet, CNI or bootstrap failure (`kubectl mend logs " + n.Name + "`)",
				Source:   "node", Blocking: true})
		}
	}
	return fs
}

// onNode explains a scheduled pod that does not start: its node, the
// sandbox (pod IPs), the images.
func onNode(in PodInput) []Finding {
	var fs []Finding
	if n := findNode(in.Nodes, in.Pod.Spec.NodeName); n != nil && in.Pod.Status.Phase == corev1.PodPending {
		fs = append(fs, notInitialized(n)...)
	}
	if e, ok := eventlog.Latest(in.Events, "", "FailedCreatePodSandBox"); ok {
		f := Finding{Cause: "the pod's sandbox (network namespace) cannot be created", Evidence: []string{fmt.Sprintf("%s: %q", e.Source, e.Message)},
			Fix: "the CNI plugin fails on the node: check its pod there", Source: e.Source, Blocking: true}
		switch {
		case containsAny(e.Message, "failed to assign an IP address", "no available IP", "InsufficientFreeAddressesInSubnet"):
			f.Cause = "the node's CNI cannot give the pod an IP address: the subnet (or the node's IP allowance) is exhausted"
			f.Fix = "free or add subnet addresses (larger or secondary CIDRs, custom networking), enable prefix delegation (VPC CNI), or use instance types with more IPs per node"
		case containsAny(e.Message, "pod does not have label vpc.amazonaws.com/PrivateIPv4Address"):
			// The VPC CNI's Windows plugin (vpc-bridge) reads the address
			// the VPC resource controller puts on Windows pods.
			f.Cause = "Windows pod networking is not enabled in the cluster: the VPC resource controller gives Windows pods no IP address"
			f.Fix = "enable Windows support: set enable-windows-ipam: \"true\" in the amazon-vpc-cni ConfigMap in kube-system (EKS \"Enabling Windows support\")"
		}
		fs = append(fs, f)
	}
	return fs
}

// inTreeProvisioners are the storage plugins removed from Kubernetes
// (CSI migration): a StorageClass naming them provisions nothing unless the
// matching CSI driver is installed.
var inTreeProvisioners = map[string]string{
	"kubernetes.io/aws-ebs":           "ebs.csi.aws.com",
	"kubernetes.io/gce-pd":            "pd.csi.storage.gke.io",
	"kubernetes.io/azure-disk":        "disk.csi.azure.com",
	"kubernetes.io/azure-file":        "file.csi.azure.com",
	"kubernetes.io/cinder":            "cinder.csi.openstack.org",
	"kubernetes.io/vsphere-volume":    "csi.vsphere.vmware.com",
	"kubernetes.io/portworx-volume":   "pxd.portworx.com",
	"kubernetes.io/rbd":               "rbd.csi.ceph.com",
	"kubernetes.io/glusterfs":         "",
	"kubernetes.io/quobyte":           "",
	"kubernetes.io/storageos":         "",
	"kubernetes.io/scaleio":           "",
	"kubernetes.io/flocker":           "",
	"kubernetes.io/azure-file-legacy": "",
}

// containers explains OOMKilled containers and images that cannot run on
// the node's platform.
func containers(in PodInput) []Finding {
	var fs []Finding
	statuses := append(append([]corev1.ContainerStatus{}, in.Pod.Status.InitContainerStatuses...), in.Pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		oom := cs.State.Terminated != nil && cs.State.Terminated.Reason == "OOMKilled" ||
			cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason == "OOMKilled"
		if oom {
			fs = append(fs, oomFinding(in.Pod, cs))
		}
	}
	if f, ok := windowsImageFinding(in); ok {
		return append(fs, f)
	}
	platform := ""
	for _, e := range in.Events {
		if containsAny(e.Message, "no match for platform in manifest", "exec format error", "image operating system", "does not match the host") {
			platform = fmt.Sprintf("%s %s: %q", e.Source, e.Reason, e.Message)
		}
	}
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && platform == "" && containsAny(w.Message, "no match for platform in manifest", "exec format error") {
			platform = fmt.Sprintf("container %s %s: %q", cs.Name, w.Reason, w.Message)
		}
	}
	if platform != "" {
		f := Finding{Cause: "an image has no variant for the node's platform (OS/architecture)", Evidence: []string{platform},
			Fix:    "publish a multi-architecture image (docker buildx --platform linux/amd64,linux/arm64), or keep the pod on matching nodes with nodeSelector kubernetes.io/arch",
			Source: eventlog.Kubelet, Blocking: true}
		if n := findNode(in.Nodes, in.Pod.Spec.NodeName); n != nil {
			f.Evidence = append(f.Evidence, fmt.Sprintf("node %s is %s/%s", n.Name, n.Labels[corev1.LabelOSStable], n.Labels[corev1.LabelArchStable]))
		}
		fs = append(fs, f)
	} else if e, ok := eventlog.Latest(in.Events, eventlog.Kubelet, "Failed"); ok && strings.Contains(e.Message, "Failed to pull image") {
		fs = append(fs, Finding{Cause: "an image cannot be pulled", Evidence: []string{fmt.Sprintf("kubelet: %q", e.Message)},
			Fix: "check the image name and tag, the registry's reachability from the node, and imagePullSecrets", Source: eventlog.Kubelet, Blocking: true})
	}
	return fs
}

func oomFinding(pod *corev1.Pod, cs corev1.ContainerStatus) Finding {
	var spec *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == cs.Name {
			spec = &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == cs.Name {
			spec = &pod.Spec.InitContainers[i]
		}
	}
	f := Finding{Cause: fmt.Sprintf("container %s was OOMKilled (%d restarts)", cs.Name, cs.RestartCount), Source: "pod status", Blocking: true}
	limit, hasLimit := corev1.ResourceList(nil), false
	if spec != nil {
		limit = spec.Resources.Limits
		_, hasLimit = limit[corev1.ResourceMemory]
		req := spec.Resources.Requests[corev1.ResourceMemory]
		if hasLimit {
			l := limit[corev1.ResourceMemory]
			f.Evidence = append(f.Evidence, fmt.Sprintf("memory limit %s, request %s: usage reached the limit and the kernel killed the container", l.String(), req.String()))
		} else {
			f.Evidence = append(f.Evidence, fmt.Sprintf("no memory limit (request %s): the node ran out of memory and the kernel picked this container", req.String()))
		}
	}
	if hasLimit {
		f.Fix = "raise resources.limits.memory above the container's peak (measure it: `kubectl top pod --containers`, or the container_memory_working_set_bytes metric), or find what grows (leak, cache, heap settings such as -Xmx/GOMEMLIMIT below the limit)"
	} else {
		f.Fix = "set a memory request that matches real usage (and a limit), so that the scheduler does not overcommit the node"
	}
	return f
}
