package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodemend.dev/nodemend/pkg/cli/explain"
)

// The EKS/Karpenter troubleshooting guide's volume, request and Windows
// cases, on the real API server. The local cluster has no kubelet, no
// attach/detach controller, no CSI driver and no Windows node, so their
// events and status are written in the exact form those components write
// them (sources in pkg/cli/explain/volumes.go and windows.go: Kubernetes
// v1.37 pkg/kubelet and pkg/volume/util/operationexecutor,
// kubernetes-sigs/aws-ebs-csi-driver pkg/driver and pkg/cloud, hcsshim's
// HCS_E_IMAGE_MISMATCH, containerd's pull error).

// finding returns the first finding whose cause contains want.
func finding(r explain.Report, want string) (explain.Finding, bool) {
	for _, f := range r.Findings {
		if strings.Contains(f.Cause, want) {
			return f, true
		}
	}
	return explain.Finding{}, false
}

func mustFinding(t *testing.T, r explain.Report, want string) explain.Finding {
	t.Helper()
	f, ok := finding(r, want)
	if !ok {
		var causes []string
		for _, f := range r.Findings {
			causes = append(causes, f.Cause)
		}
		t.Fatalf("no finding %q in:\n  %s", want, strings.Join(causes, "\n  "))
	}
	return f
}

func evidenceHas(f explain.Finding, want string) bool {
	for _, e := range f.Evidence {
		if strings.Contains(e, want) {
			return true
		}
	}
	return false
}

// boundClaim creates a PersistentVolume and a claim bound to it, the
// claim's status written as the PV controller writes it.
func boundClaim(t *testing.T, ns, name string, src corev1.PersistentVolumeSource) {
	t.Helper()
	ctx := context.Background()
	pvName := "pv-" + ns + "-" + name
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: src, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name}}}
	if _, err := core.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: &empty, VolumeName: pvName, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}}}
	created, err := core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.ClaimBound
	created.Status.Capacity = pv.Spec.Capacity
	created.Status.AccessModes = pv.Spec.AccessModes
	if _, err := core.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func claimVolume(claim string) corev1.Volume {
	return corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	created, err := core.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != "" {
		created.Status = p.Status
		if _, err := core.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExplainVolumes: FailedAttachVolume and FailedMount as the
// attach/detach controller, the kubelet and the EBS CSI driver write them,
// and PersistentVolumes of the removed in-tree EBS plugin.
func TestExplainVolumes(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-vol")
	node := createNode(t, testNode{name: "ex-vol"})
	// The attach/detach controller's record of the node's attachments, and
	// the CSINode the kubelet writes for the EBS driver's node plugin.
	for i := range 25 {
		node.Status.VolumesAttached = append(node.Status.VolumesAttached, corev1.AttachedVolume{
			Name: corev1.UniqueVolumeName(fmt.Sprintf("kubernetes.io/csi/ebs.csi.aws.com^vol-%017d", i)), DevicePath: ""})
	}
	if _, err := core.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	count := int32(25)
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "ex-vol"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: "ebs.csi.aws.com", NodeID: "i-0def", Allocatable: &storagev1.VolumeNodeResources{Count: &count}}}}}
	if _, err := core.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.StorageV1().CSINodes().Delete(context.Background(), "ex-vol", metav1.DeleteOptions{}) })

	onNode := func(name string, mut func(*corev1.Pod)) {
		p := pausePod(ns, name)
		p.Spec.NodeName = "ex-vol"
		p.Status.Phase = corev1.PodPending
		p.Spec.Volumes = []corev1.Volume{claimVolume(name + "-data")}
		if mut != nil {
			mut(p)
		}
		createPod(t, p)
	}
	ebs := func(vol string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: vol, FSType: "ext4"}}
	}
	ad := func(pod, msg string) {
		coreEvent(t, ns, "Pod", pod, "attachdetach-controller", "Warning", "FailedAttachVolume", msg)
	}
	kubelet := func(pod, msg string) { coreEvent(t, ns, "Pod", pod, "kubelet", "Warning", "FailedMount", msg) }

	boundClaim(t, ns, "stuck-data", ebs("vol-0abc"))
	onNode("stuck", nil)
	ad("stuck", `AttachVolume.Attach failed for volume "pv-explain-vol-stuck-data" : rpc error: code = Internal desc = Could not attach volume "vol-0abc" to node "i-0def": attachment of disk "vol-0abc" failed, expected device to be attached but was attaching`)
	kubelet("stuck", `Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data kube-api-access-8x2zq]: timed out waiting for the condition`)

	boundClaim(t, ns, "limit-data", ebs("vol-0abd"))
	onNode("limit", nil)
	ad("limit", `AttachVolume.Attach failed for volume "pv-explain-vol-limit-data" : rpc error: code = ResourceExhausted desc = Attachment limit exceeded for volume "vol-0abd" on node "i-0def": limit exceeded: operation error EC2: AttachVolume, https response error StatusCode: 400, api error AttachmentLimitExceeded: You have reached the maximum number of volume attachments`)

	boundClaim(t, ns, "noattacher-data", ebs("vol-0abe"))
	onNode("noattacher", nil)
	ad("noattacher", `AttachVolume.Attach failed for volume "pv-explain-vol-noattacher-data" : timed out waiting for external-attacher of ebs.csi.aws.com CSI driver to attach volume vol-0abe`)

	boundClaim(t, ns, "elsewhere-data", ebs("vol-0abf"))
	onNode("elsewhere", nil)
	ad("elsewhere", `Waiting for detach for volume "pv-explain-vol-elsewhere-data" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`)

	boundClaim(t, ns, "slowmount-data", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "efs.csi.aws.com", VolumeHandle: "fs-0123"}})
	onNode("slowmount", nil)
	kubelet("slowmount", `MountVolume.SetUp failed for volume "pv-explain-vol-slowmount-data" : rpc error: code = DeadlineExceeded desc = context deadline exceeded`)
	kubelet("slowmount", `Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[]: timed out waiting for the condition`)

	boundClaim(t, ns, "nodriver-data", ebs("vol-0ac0"))
	onNode("nodriver", nil)
	kubelet("nodriver", `MountVolume.MountDevice failed for volume "pv-explain-vol-nodriver-data" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name ebs.csi.aws.com not found in the list of registered CSI drivers`)

	onNode("nocm", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}
	})
	kubelet("nocm", `MountVolume.SetUp failed for volume "cfg" : configmap "app-config" not found`)

	// A statically provisioned EBS volume of the in-tree plugin, before and
	// after the EBS CSI driver is installed.
	boundClaim(t, ns, "legacy-data", corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-west-2a/vol-0legacy", FSType: "ext4"}})
	onNode("legacy", nil)

	r := explainJSON(t, "-n", ns, "explain", "pod/stuck")
	f := mustFinding(t, r, "volume pv-explain-vol-stuck-data is stuck attaching to node ex-vol")
	if !f.Blocking || !evidenceHas(f, "reports 25 volumes attached") || !evidenceHas(f, "driver ebs.csi.aws.com allows 25 volumes") ||
		!strings.Contains(f.Fix, "ebs.csi.aws.com/agent-not-ready") || !evidenceHas(f, "expected device to be attached but was attaching") {
		t.Errorf("stuck attaching: %+v", f)
	}
	mustFinding(t, r, "volume(s) data timed out attaching to node ex-vol")

	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/limit"), "node ex-vol reached its volume attach limit")
	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/noattacher"), "the CSI driver's attacher did not answer for volume pv-explain-vol-noattacher-data")
	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/elsewhere"), "volume pv-explain-vol-elsewhere-data is still attached to another node")

	r = explainJSON(t, "-n", ns, "explain", "pod/slowmount")
	if f := mustFinding(t, r, "volume(s) data are attached but timed out mounting on node ex-vol"); !strings.Contains(f.Fix, "fsGroupChangePolicy: OnRootMismatch") {
		t.Errorf("mount timeout fix: %s", f.Fix)
	}
	mustFinding(t, r, "mounting volume pv-explain-vol-slowmount-data on node ex-vol times out (MountVolume.SetUp)")

	f = mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/nodriver"), "CSI driver ebs.csi.aws.com is not running on node ex-vol")
	if !evidenceHas(f, "CSINode ex-vol lists drivers: ebs.csi.aws.com") {
		t.Errorf("no CSINode evidence: %+v", f)
	}
	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/nocm"), "ConfigMap app-config, which volume cfg needs, does not exist in namespace explain-vol")

	f = mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/legacy"), "in-tree awsElasticBlockStore volume (aws://us-west-2a/vol-0legacy)")
	if !f.Blocking || !strings.Contains(f.Cause, "which is not installed") || !strings.Contains(f.Fix, "spec.csi {driver: ebs.csi.aws.com") {
		t.Errorf("in-tree PV without the driver: %+v", f)
	}
	driver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "ebs.csi.aws.com"}}
	if _, err := core.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.StorageV1().CSIDrivers().Delete(context.Background(), "ebs.csi.aws.com", metav1.DeleteOptions{})
	})
	f = mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/legacy"), "in-tree awsElasticBlockStore volume")
	if f.Blocking || !evidenceHas(f, "CSIDriver ebs.csi.aws.com is installed") {
		t.Errorf("in-tree PV with the driver: %+v", f)
	}
}

// TestExplainRequests: a pod without requests gets the LimitRange advice;
// a pod created after a LimitRange with defaultRequest has requests (the
// API server's LimitRanger admission fills them in), so no advice.
func TestExplainRequests(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-req")
	createPod(t, pausePod(ns, "bare"))
	f := mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/bare"), "1 container(s) have no cpu or memory requests")
	if f.Blocking || !evidenceHas(f, "container c has no cpu and memory request") || !evidenceHas(f, "has no LimitRange with a container defaultRequest") ||
		!strings.Contains(f.Fix, "kind: LimitRange") {
		t.Errorf("no-requests finding: %+v", f)
	}
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "defaults"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}}
	if _, err := core.CoreV1().LimitRanges(ns).Create(ctx, lr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f = mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/bare"), "have no cpu or memory requests")
	if !evidenceHas(f, "LimitRange explain-req/defaults sets default requests cpu=100m, memory=128Mi") {
		t.Errorf("LimitRange evidence: %+v", f)
	}
	createPod(t, pausePod(ns, "after"))
	if _, ok := finding(explainJSON(t, "-n", ns, "explain", "pod/after"), "no cpu or memory requests"); ok {
		t.Error("a pod created after the LimitRange still lacks requests")
	}
}

// TestExplainWindows: an image for another Windows Server version, seen
// at pull (containerd, as in Karpenter's troubleshooting guide) and at
// start (hcsshim's HCS_E_IMAGE_MISMATCH through the kubelet's "Error: %v"),
// and Windows pods without the VPC resource controller's address.
func TestExplainWindows(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-win")
	n := createNode(t, testNode{name: "ex-win", labels: map[string]string{corev1.LabelOSStable: "windows", "node.kubernetes.io/windows-build": "10.0.20348"}})
	n.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: "windows", Architecture: "amd64", OSImage: "Windows Server 2022 Datacenter", KernelVersion: "10.0.20348.2113"}
	if _, err := core.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	win := func(name string, mut func(*corev1.Pod)) {
		p := pausePod(ns, name)
		p.Spec.NodeName = "ex-win"
		p.Spec.Containers[0].Image = "mcr.microsoft.com/windows/servercore:ltsc2019"
		p.Status.Phase = corev1.PodPending
		if mut != nil {
			mut(p)
		}
		createPod(t, p)
	}
	win("pull", nil)
	coreEvent(t, ns, "Pod", "pull", "kubelet", "Warning", "Failed",
		`Failed to pull image "mcr.microsoft.com/windows/servercore:ltsc2019": rpc error: code = NotFound desc = failed to pull and unpack image "mcr.microsoft.com/windows/servercore:ltsc2019": no match for platform in manifest: not found`)
	win("start", func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "example.com/app:1.0-ltsc2019", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: "failed to create containerd task: failed to create shim task: hcs::CreateComputeSystem c: The container operating system does not match the host operating system.: unknown"}}}}
	})
	win("noipam", nil)
	coreEvent(t, ns, "Pod", "noipam", "kubelet", "Warning", "FailedCreatePodSandBox",
		`Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "4f2e": plugin type="vpc-bridge" name="vpc" failed (add): failed to parse Kubernetes args: pod does not have label vpc.amazonaws.com/PrivateIPv4Address`)

	f := mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/pull"), "image mcr.microsoft.com/windows/servercore:ltsc2019 is built for another Windows version than node ex-win runs (Windows Server 2022")
	if !strings.Contains(f.Fix, `node.kubernetes.io/windows-build: "10.0.20348"`) || !evidenceHas(f, "kernel 10.0.20348.2113") {
		t.Errorf("pull: %+v", f)
	}
	if _, ok := finding(explainJSON(t, "-n", ns, "explain", "pod/pull"), "no variant for the node's platform"); ok {
		t.Error("the Linux architecture advice is given for a Windows version mismatch")
	}
	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/start"), "image example.com/app:1.0-ltsc2019 is built for another Windows version")
	mustFinding(t, explainJSON(t, "-n", ns, "explain", "pod/noipam"), "Windows pod networking is not enabled")
}

// TestExplainStrayNodePoolLabel: a node that carries karpenter.sh/nodepool
// without a NodeClaim (a node group's label, set by hand) is named, with
// what it breaks; a node a NodeClaim stands for is not.
func TestExplainStrayNodePoolLabel(t *testing.T) {
	d := dyn(t)
	createNode(t, testNode{name: "ex-mng-1", labels: map[string]string{"karpenter.sh/nodepool": "system", "eks.amazonaws.com/nodegroup": "system"}})
	createNode(t, testNode{name: "ex-kpt-1", labels: map[string]string{"karpenter.sh/nodepool": "system"}})
	createUnstructured(t, d, unstructuredNodeClaim("system-x1y2z", "system"), map[string]any{"nodeName": "ex-kpt-1", "providerID": "aws:///us-west-2a/i-0kpt",
		"conditions": []any{map[string]any{"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": condTime()}}})
	f := mustFinding(t, explainJSON(t, "explain", "node/ex-mng-1"), "the node carries karpenter.sh/nodepool=system but Karpenter does not manage it")
	if !f.Blocking || !strings.Contains(f.Fix, "kubectl label node ex-mng-1 karpenter.sh/nodepool-") || !evidenceHas(f, "the repair would fail") {
		t.Errorf("stray label: %+v", f)
	}
	if _, ok := finding(explainJSON(t, "explain", "node/ex-kpt-1"), "Karpenter does not manage it"); ok {
		t.Error("a node with its NodeClaim is called unmanaged")
	}
}

func unstructuredNodeClaim(name, pool string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"karpenter.sh/nodepool": pool}},
		"spec":     map[string]any{"nodeClassRef": nodeClassRef(), "requirements": karpenterRequirements()},
	}}
}
