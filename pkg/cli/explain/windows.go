package explain

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
)

// Windows runs a process-isolated container only on the Windows Server
// version its image was built for. The messages that say so:
//
//   - containerd's image pull, for a manifest list without the host's
//     os.version: "failed to pull and unpack image %q: no match for
//     platform in manifest: not found" in the kubelet's "Failed to pull
//     image" (Karpenter's troubleshooting guide, "Windows pods fail to
//     launch with image pull error");
//   - hcsshim at container creation, HCS_E_IMAGE_MISMATCH (0xc0370101):
//     "The container operating system does not match the host operating
//     system.";
//   - Docker's check: "a Windows version %s-based image is incompatible
//     with a %s host".
var windowsMismatch = []string{
	"no match for platform in manifest",
	"does not match the host operating system",
	"0xc0370101",
	"-based image is incompatible with a",
}

// windowsLabelBuild is the kubelet's label of a Windows node's OS build
// (node.kubernetes.io/windows-build, "10.0.20348").
const windowsLabelBuild = "node.kubernetes.io/windows-build"

// windowsVersions names the Windows Server builds (Microsoft's Windows
// container version compatibility table) and their image tags.
var windowsVersions = map[string]string{
	"10.0.17763": "Windows Server 2019 (ltsc2019 images)",
	"10.0.20348": "Windows Server 2022 (ltsc2022 images)",
	"10.0.26100": "Windows Server 2025 (ltsc2025 images)",
}

var pulledImage = regexp.MustCompile(`Failed to pull image "([^"]+)"`)

// windowsImageFinding explains an image built for another Windows version
// than its node's; ok is false when the pod is not on a Windows node or no
// such message was written.
func windowsImageFinding(in PodInput) (Finding, bool) {
	n := findNode(in.Nodes, in.Pod.Spec.NodeName)
	if n == nil || !isWindows(n) {
		return Finding{}, false
	}
	evidence, image := "", ""
	for _, e := range in.Events {
		if containsAny(e.Message, windowsMismatch...) {
			evidence = fmt.Sprintf("%s %s: %q", e.Source, e.Reason, e.Message)
			if m := pulledImage.FindStringSubmatch(e.Message); m != nil {
				image = m[1]
			}
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, in.Pod.Status.InitContainerStatuses...), in.Pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		msg := ""
		if w := cs.State.Waiting; w != nil {
			msg = w.Message
		} else if t := cs.LastTerminationState.Terminated; t != nil {
			msg = t.Message
		}
		if evidence == "" && containsAny(msg, windowsMismatch...) {
			evidence = fmt.Sprintf("container %s: %q", cs.Name, msg)
			image = cs.Image
		}
	}
	if evidence == "" {
		return Finding{}, false
	}
	build := windowsBuild(n)
	version := windowsVersions[build]
	if version == "" {
		version = "build " + build
	}
	what := "an image"
	if image != "" {
		what = "image " + image
	}
	f := Finding{
		Cause:    fmt.Sprintf("%s is built for another Windows version than node %s runs (%s): Windows runs a container only on the host version its image was built for", what, n.Name, version),
		Evidence: []string{evidence, fmt.Sprintf("node %s: %s=%s, OS image %q, kernel %s", n.Name, windowsLabelBuild, n.Labels[windowsLabelBuild], n.Status.NodeInfo.OSImage, n.Status.NodeInfo.KernelVersion)},
		Fix: fmt.Sprintf("use the image variant for the node's version (%s), or publish one manifest list with an image per Windows version; "+
			"and keep the pod on matching nodes: nodeSelector {%s: %q} (with Karpenter, a NodePool requiring that label over an EC2NodeClass whose AMI is that Windows version, e.g. amiSelectorTerms alias windows2022@latest)",
			version, windowsLabelBuild, build),
		Source: eventlog.Kubelet, Blocking: true,
	}
	return f, true
}

func isWindows(n *corev1.Node) bool {
	return n.Labels[corev1.LabelOSStable] == "windows" || strings.EqualFold(n.Status.NodeInfo.OperatingSystem, "windows")
}

// windowsBuild is the node's OS build: its label, else the major.minor.build
// of its kernel version ("10.0.20348.2113").
func windowsBuild(n *corev1.Node) string {
	if b := n.Labels[windowsLabelBuild]; b != "" {
		return b
	}
	parts := strings.Split(n.Status.NodeInfo.KernelVersion, ".")
	if len(parts) >= 3 {
		return strings.Join(parts[:3], ".")
	}
	return n.Status.NodeInfo.KernelVersion
}
