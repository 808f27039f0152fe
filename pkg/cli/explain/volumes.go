package explain

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
)

// The volume messages explained here, and who writes them (Kubernetes
// v1.37 unless said otherwise):
//
//   - kubelet, FailedMount: "Unable to attach or mount volumes: %v" of the
//     volume manager's error "unmounted volumes=%v, unattached volumes=%v,
//     failed to process volumes=%v: %w" (pkg/kubelet/kubelet.go,
//     pkg/kubelet/volumemanager/volume_manager.go WaitForAttachAndMount;
//     the wait is podAttachAndMountTimeout, 2m3s). Kubelets before the wait
//     package's context rewrite end it with "timed out waiting for the
//     condition"; 1.37's does not emit it for a plain timeout, so the
//     volume operation events below are then the only ones.
//   - kubelet, FailedMount, and attach/detach controller,
//     FailedAttachVolume: "<operation> failed for volume %q : <error>"
//     (pkg/volume/util/operationexecutor: generateVolumeMsg; operations
//     MountVolume.SetUp, MountVolume.MountDevice, MountVolume.WaitForAttach,
//     MapVolume.*, AttachVolume.Attach).
//   - the CSI plugin's errors inside them (pkg/volume/csi): "driver name %s
//     not found in the list of registered CSI drivers" (csi_client.go),
//     "timed out waiting for external-attacher of %v CSI driver to %v
//     volume %v" (csi_attacher.go), and the driver's own message from the
//     VolumeAttachment's status.attachError.
//   - attach/detach controller, FailedAttachVolume for a volume attached
//     elsewhere: "Waiting for detach for volume %q Volume is already
//     exclusively attached to one node, waiting on detach before it can be
//     attached to another node", "... Volume is already used by pod(s) %s"
//     (reconciler.go; before v1.33 "Multi-Attach error for volume ...").
//   - the AWS EBS CSI driver (kubernetes-sigs/aws-ebs-csi-driver
//     pkg/driver/controller.go, pkg/cloud/cloud.go): "rpc error: code =
//     Internal desc = Could not attach volume %q to node %q: attachment of
//     disk %q failed, expected device to be attached but was attaching",
//     and "code = ResourceExhausted desc = Attachment limit exceeded for
//     volume %q on node %q: ...".

// kubeletMountWait parses the kubelet's "Unable to attach or mount
// volumes" FailedMount message.
var kubeletMountWait = regexp.MustCompile(`unmounted volumes=\[([^\]]*)\], unattached volumes=\[([^\]]*)\](?:, failed to process volumes=\[([^\]]*)\])?: (.*)$`)

// volumeOp parses "<operation> failed for volume "<name>" : <error>".
var volumeOp = regexp.MustCompile(`^((?:MountVolume|MapVolume|AttachVolume)\.[A-Za-z.]+(?: [a-z ]+)?) failed for volume "([^"]*)" (?:[^:]*)?: (.*)$`)

// waitingForDetach matches the attach/detach controller's messages for a
// volume still attached to another node (v1.33+ and the older wording).
var waitingForDetach = regexp.MustCompile(`^(?:Waiting for detach|Multi-Attach error) for volume "([^"]*)" (.*)$`)

// unregisteredDriver and missingSource are the CSI plugin's and the
// kubelet's configmap/secret volume plugins' errors.
var (
	unregisteredDriver = regexp.MustCompile(`driver name (\S+) not found in the list of registered CSI drivers`)
	missingSource      = regexp.MustCompile(`(configmap|secret) "([^"]+)" not found`)
)

// inTree is a volume of a removed in-tree plugin: the plugin, the CSI
// driver CSI migration hands it to, and the disk it names.
type inTree struct{ plugin, driver, disk string }

// inTreeOfPV finds the in-tree plugin a PersistentVolume names.
func inTreeOfPV(s corev1.PersistentVolumeSource) (inTree, bool) {
	switch {
	case s.AWSElasticBlockStore != nil:
		return inTree{"awsElasticBlockStore", "ebs.csi.aws.com", s.AWSElasticBlockStore.VolumeID}, true
	case s.GCEPersistentDisk != nil:
		return inTree{"gcePersistentDisk", "pd.csi.storage.gke.io", s.GCEPersistentDisk.PDName}, true
	case s.AzureDisk != nil:
		return inTree{"azureDisk", "disk.csi.azure.com", s.AzureDisk.DiskName}, true
	case s.Cinder != nil:
		return inTree{"cinder", "cinder.csi.openstack.org", s.Cinder.VolumeID}, true
	case s.VsphereVolume != nil:
		return inTree{"vsphereVolume", "csi.vsphere.vmware.com", s.VsphereVolume.VolumePath}, true
	}
	return inTree{}, false
}

// inTreeOfVolume finds the in-tree plugin an inline pod volume names: the
// same plugins as a PersistentVolume's, and all but Cinder with the same
// source types, so the one table above decides.
func inTreeOfVolume(s corev1.VolumeSource) (inTree, bool) {
	pv := corev1.PersistentVolumeSource{
		AWSElasticBlockStore: s.AWSElasticBlockStore, GCEPersistentDisk: s.GCEPersistentDisk,
		AzureDisk: s.AzureDisk, VsphereVolume: s.VsphereVolume,
	}
	if s.Cinder != nil {
		pv.Cinder = &corev1.CinderPersistentVolumeSource{VolumeID: s.Cinder.VolumeID}
	}
	return inTreeOfPV(pv)
}

// volumes explains claims that do not bind, volumes that do not attach or
// mount, and volumes that still use removed in-tree plugins.
func volumes(in PodInput) []Finding {
	var fs []Finding
	fs = append(fs, claimFindings(in)...)
	fs = append(fs, inTreeFindings(in)...)
	fs = append(fs, attachFindings(in)...)
	fs = append(fs, mountFindings(in)...)
	return fs
}

func claimFindings(in PodInput) []Finding {
	var fs []Finding
	for _, v := range in.Pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := in.Claims[v.PersistentVolumeClaim.ClaimName]
		if pvc == nil {
			fs = append(fs, Finding{Cause: "PersistentVolumeClaim " + v.PersistentVolumeClaim.ClaimName + " does not exist", Fix: "create it, or fix the claim name", Source: "pod spec", Blocking: true})
			continue
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			continue
		}
		f := Finding{Cause: "PersistentVolumeClaim " + pvc.Name + " is " + string(pvc.Status.Phase), Fix: "see the claim's events: its provisioner must create the volume", Source: "persistentvolumeclaim", Blocking: true}
		if pvc.Spec.StorageClassName != nil {
			if sc := in.StorageClasses[*pvc.Spec.StorageClassName]; sc != nil {
				if csi, ok := inTreeProvisioners[sc.Provisioner]; ok {
					f.Cause = fmt.Sprintf("PersistentVolumeClaim %s uses StorageClass %s with the removed in-tree provisioner %s", pvc.Name, sc.Name, sc.Provisioner)
					f.Fix = "in-tree provisioners are gone: use a StorageClass whose provisioner is a CSI driver"
					if csi != "" {
						f.Fix += " (" + csi + ") and install that driver"
					}
				} else if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && in.Pod.Spec.NodeName == "" {
					f.Cause = "PersistentVolumeClaim " + pvc.Name + " waits for the pod to be scheduled (WaitForFirstConsumer)"
					f.Fix = "nothing about the claim: it binds once the pod has a node; see the scheduling findings"
					f.Blocking = false
				}
			} else {
				f.Cause = fmt.Sprintf("PersistentVolumeClaim %s names StorageClass %q, which does not exist", pvc.Name, *pvc.Spec.StorageClassName)
				f.Fix = "create the StorageClass or fix the claim's storageClassName"
			}
		}
		for _, e := range in.ClaimEvents {
			if e.Name == pvc.Name && e.Type == corev1.EventTypeWarning {
				f.Evidence = append(f.Evidence, fmt.Sprintf("%s %s: %q", e.Source, e.Reason, e.Message))
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// inTreeFindings explains volumes that name a removed in-tree plugin:
// statically provisioned PersistentVolumes (spec.awsElasticBlockStore,
// ...) and inline pod volumes. Kubernetes serves them only by CSI
// migration, through the plugin's CSI driver, which must be installed;
// Karpenter does not count their attachments either (it logs "uses an
// in-tree storage plugin which is unsupported by Karpenter"), so it can
// put more of them on a node than the node can attach.
func inTreeFindings(in PodInput) []Finding {
	var fs []Finding
	for _, v := range in.Pod.Spec.Volumes {
		what := "volume " + v.Name + " is an inline"
		it, ok := inTreeOfVolume(v.VolumeSource)
		if v.PersistentVolumeClaim != nil {
			pv := in.Volumes[v.PersistentVolumeClaim.ClaimName]
			if pv == nil {
				continue
			}
			what = "PersistentVolume " + pv.Name + " (claim " + v.PersistentVolumeClaim.ClaimName + ") is an"
			it, ok = inTreeOfPV(pv.Spec.PersistentVolumeSource)
		}
		if !ok {
			continue
		}
		id := it.disk
		f := Finding{Cause: fmt.Sprintf("%s in-tree %s volume (%s): the in-tree plugin is removed, so it works only through CSI migration to %s", what, it.plugin, id, it.driver),
			Evidence: []string{fmt.Sprintf("spec.%s: %s", it.plugin, id)},
			Source:   "persistentvolume"}
		switch {
		case in.CSIDrivers == nil:
			f.Evidence = append(f.Evidence, "the cluster's CSIDrivers could not be read: check that "+it.driver+" is installed")
		case !in.CSIDrivers[it.driver]:
			f.Cause += ", which is not installed: nothing can attach or mount it"
			f.Blocking = true
			f.Evidence = append(f.Evidence, "no CSIDriver object "+it.driver+" in the cluster")
		default:
			f.Evidence = append(f.Evidence, "CSIDriver "+it.driver+" is installed")
		}
		addon := ""
		if it.driver == "ebs.csi.aws.com" {
			addon = " (on EKS the aws-ebs-csi-driver add-on)"
		}
		f.Fix = fmt.Sprintf("install the %s CSI driver"+addon+" if it is missing, and move the volume to CSI: "+
			"recreate the PersistentVolume with spec.csi {driver: %s, volumeHandle: %s} and the same capacity, access modes and zone node affinity "+
			"(set persistentVolumeReclaimPolicy: Retain on the old one first, so deleting it keeps the disk); Karpenter counts the attachments of CSI volumes only",
			it.driver, it.driver, id)
		if v.PersistentVolumeClaim == nil {
			f.Fix = fmt.Sprintf("replace the inline volume by a PersistentVolumeClaim of a %s StorageClass (or a CSI PersistentVolume for the existing disk %s)", it.driver, id)
		}
		fs = append(fs, f)
	}
	return fs
}

// attachFindings explain the latest FailedAttachVolume.
func attachFindings(in PodInput) []Finding {
	e, ok := eventlog.Latest(in.Events, "", "FailedAttachVolume")
	if !ok {
		return nil
	}
	node := findNode(in.Nodes, in.Pod.Spec.NodeName)
	nodeName := in.Pod.Spec.NodeName
	f := Finding{Cause: "a volume does not attach to node " + nodeName, Evidence: []string{fmt.Sprintf("%s: %q", e.Source, e.Message)},
		Fix: "read the CSI driver's error; check the volume exists in the node's zone and is not attached elsewhere", Source: e.Source, Blocking: true}
	volume := ""
	if m := volumeOp.FindStringSubmatch(e.Message); m != nil {
		volume = m[2]
	}
	switch {
	case containsAny(e.Message, "expected device to be attached but was attaching"):
		f.Cause = fmt.Sprintf("volume %s is stuck attaching to node %s: the instance had no free attachment slot (or device name) for it, though the scheduler and Karpenter counted room", volume, nodeName)
		f.Evidence = append(f.Evidence, attachedCount(node, in.CSINode)...)
		if n := inTreeCount(in); n > 0 {
			f.Evidence = append(f.Evidence, fmt.Sprintf("%d of the pod's volumes use an in-tree plugin, whose attachments Karpenter does not count", n))
		}
		f.Fix = "keep pods with volumes from piling onto one node: with Karpenter, add the startupTaint ebs.csi.aws.com/agent-not-ready:NoExecute to the NodePool " +
			"(pods wait until the EBS CSI node plugin has reported the node's attach limit), move in-tree PersistentVolumes and StorageClasses to ebs.csi.aws.com, " +
			"and spread such pods (topologySpreadConstraints or podAntiAffinity on kubernetes.io/hostname); " +
			"the driver detaches a volume stuck attaching and retries, and a stuck device name clears when the instance is replaced (`kubectl mend explain node/" + nodeName + "`)"
	case containsAny(e.Message, "Attachment limit exceeded", "AttachmentLimitExceeded", "attachment limit", "maximum number of attached volumes", "max volume", "volume limit"):
		f.Cause = "node " + nodeName + " reached its volume attach limit"
		f.Evidence = append(f.Evidence, attachedCount(node, in.CSINode)...)
		f.Fix = "run the pod on a node with free attachment slots (bigger instance type, fewer volumes per node); the scheduler counts CSINode allocatable, so a wrong driver count is a CSI node plugin bug"
	case containsAny(e.Message, "timed out waiting for external-attacher"):
		f.Cause = "the CSI driver's attacher did not answer for volume " + volume + ": its controller (external-attacher sidecar) is not running or cannot reach the cloud API"
		f.Fix = "check the driver's controller pods (e.g. ebs-csi-controller in kube-system: csi-attacher and the driver container logs) and its IAM permissions; `kubectl get volumeattachment` shows the attachment it should act on"
	case waitingForDetach.MatchString(e.Message):
		f.Cause = "volume " + waitingForDetach.FindStringSubmatch(e.Message)[1] + " is still attached to another node, and it can be attached to one node only (ReadWriteOnce)"
		f.Fix = "the old pod or node must let go: if a pod elsewhere still uses it (a Deployment with more than one replica on a ReadWriteOnce claim), use a StatefulSet or ReadWriteMany storage; " +
			"if the old node is gone or unreachable, the attach/detach controller detaches after its 6-minute maxWaitForUnmountDuration, or at once when the node gets the node.kubernetes.io/out-of-service taint"
	}
	return []Finding{f}
}

// attachedCount tells how many volumes the node has attached and how many
// its CSI drivers allow.
func attachedCount(node *corev1.Node, csi *storagev1.CSINode) []string {
	if node == nil {
		return nil
	}
	out := []string{fmt.Sprintf("node %s reports %d volumes attached (status.volumesAttached)", node.Name, len(node.Status.VolumesAttached))}
	if csi != nil {
		for _, d := range csi.Spec.Drivers {
			if d.Allocatable != nil && d.Allocatable.Count != nil {
				out = append(out, fmt.Sprintf("CSINode %s: driver %s allows %d volumes", csi.Name, d.Name, *d.Allocatable.Count))
			}
		}
	}
	return out
}

func inTreeCount(in PodInput) int {
	return len(inTreeFindings(in))
}

// mountFindings explain the kubelet's FailedMount events: its overall
// timeout, and the failing volume operations.
func mountFindings(in PodInput) []Finding {
	var fs []Finding
	nodeName := in.Pod.Spec.NodeName
	ops := latestVolumeOps(in.Events)
	if e, ok := latestWith(in.Events, "FailedMount", "unmounted volumes="); ok {
		f := Finding{Source: e.Source, Blocking: true, Evidence: []string{fmt.Sprintf("%s: %q", e.Source, e.Message)}}
		m := kubeletMountWait.FindStringSubmatch(e.Message)
		var unmounted, unattached, unprocessed []string
		if m != nil {
			unmounted, unattached, unprocessed = strings.Fields(m[1]), strings.Fields(m[2]), strings.Fields(m[3])
		}
		notAttached := intersect(unmounted, unattached)
		switch {
		case len(unprocessed) > 0:
			f.Cause = fmt.Sprintf("the kubelet on %s cannot set up volume(s) %s at all: their claim, PersistentVolume or volume source is missing or invalid", nodeName, strings.Join(unprocessed, ", "))
			f.Fix = "check the pod's volumes against the claims and PersistentVolumes in the cluster (`kubectl describe pvc`); the volume findings above name what is missing"
		case len(notAttached) > 0:
			f.Cause = fmt.Sprintf("volume(s) %s timed out attaching to node %s: the kubelet waited 2 minutes for the attach/detach controller and gave up (it retries)", strings.Join(notAttached, ", "), nodeName)
			f.Fix = "attaching is the attach/detach controller's and the CSI driver's controller's job: see the FailedAttachVolume finding, the driver's controller pods (e.g. ebs-csi-controller) and `kubectl get volumeattachment` for the node"
		default:
			f.Cause = fmt.Sprintf("volume(s) %s are attached but timed out mounting on node %s: the kubelet waited 2 minutes and gave up (it retries)", strings.Join(unmounted, ", "), nodeName)
			f.Fix = "mounting happens on the node: check the CSI driver's node plugin pod there (e.g. ebs-csi-node, efs-csi-node), for NFS/EFS the network path to the server (security groups, a mount target in the node's zone); " +
				"a volume with many files and an fsGroup is re-owned file by file on every mount: set securityContext.fsGroupChangePolicy: OnRootMismatch"
		}
		if len(unmounted) == 0 && m == nil {
			f.Cause = "the kubelet on " + nodeName + " cannot attach or mount the pod's volumes"
		}
		for _, op := range ops {
			f.Evidence = append(f.Evidence, fmt.Sprintf("%s: %q", op.Source, op.Message))
		}
		fs = append(fs, f)
	}
	if e, ok := latestWith(in.Events, "", "Node has reached its volume attachment limit"); ok {
		fs = append(fs, Finding{Cause: "the kubelet on " + nodeName + " rejected the pod: the node has no volume attachment slot left",
			Evidence: []string{fmt.Sprintf("%s %s: %q", e.Source, e.Reason, e.Message)},
			Fix:      "the pod is recreated elsewhere by its controller; keep such pods apart (topologySpreadConstraints) or use instance types with more attachment slots",
			Source:   e.Source, Blocking: true})
	}
	for _, op := range ops {
		if f, ok := volumeOpFinding(in, op); ok {
			fs = append(fs, f)
		}
	}
	return fs
}

// volumeOpFinding explains one failing MountVolume/MapVolume operation
// whose cause it recognizes.
func volumeOpFinding(in PodInput, e eventlog.Event) (Finding, bool) {
	m := volumeOp.FindStringSubmatch(e.Message)
	if m == nil {
		return Finding{}, false
	}
	volume, msg := m[2], m[3]
	nodeName := in.Pod.Spec.NodeName
	f := Finding{Evidence: []string{fmt.Sprintf("%s: %q", e.Source, e.Message)}, Source: e.Source, Blocking: true}
	if d := unregisteredDriver.FindStringSubmatch(msg); d != nil {
		f.Cause = fmt.Sprintf("CSI driver %s is not running on node %s, so volume %s cannot be mounted there", d[1], nodeName, volume)
		if in.CSINode != nil {
			names := []string{}
			for _, dr := range in.CSINode.Spec.Drivers {
				names = append(names, dr.Name)
			}
			sort.Strings(names)
			if len(names) == 0 {
				names = []string{"none"}
			}
			f.Evidence = append(f.Evidence, fmt.Sprintf("CSINode %s lists drivers: %s", in.CSINode.Name, strings.Join(names, ", ")))
		}
		f.Fix = fmt.Sprintf("the driver's node DaemonSet pod registers it with the kubelet: check that it runs on %s (tolerations for the node's taints, nodeSelector, image pull); "+
			"with Karpenter, a NodePool startupTaint for the driver (e.g. ebs.csi.aws.com/agent-not-ready) keeps pods away until it runs", nodeName)
		return f, true
	}
	if r := missingSource.FindStringSubmatch(msg); r != nil {
		kind := map[string]string{"configmap": "ConfigMap", "secret": "Secret"}[r[1]]
		f.Cause = fmt.Sprintf("%s %s, which volume %s needs, does not exist in namespace %s", kind, r[2], volume, in.Pod.Namespace)
		f.Fix = fmt.Sprintf("create the %s, or mark the volume optional: true if the pod can start without it", kind)
		return f, true
	}
	if containsAny(msg, "DeadlineExceeded", "deadline exceeded", "timed out", "timeout") {
		f.Cause = fmt.Sprintf("mounting volume %s on node %s times out (%s)", volume, nodeName, m[1])
		f.Fix = "the driver's node plugin did not finish in time: read its logs on the node; for network file systems (EFS, NFS) check the route and security groups to the server and that a mount target exists in the node's zone"
		return f, true
	}
	if containsAny(msg, "volume attachment is being deleted") {
		f.Cause = "volume " + volume + " is being detached from node " + nodeName + " while the pod waits for it"
		f.Fix = "wait for the detach to finish; it is attached again afterwards"
		return f, true
	}
	return Finding{}, false
}

// latestVolumeOps returns the latest failing MountVolume/MapVolume event
// per volume, in order of time.
func latestVolumeOps(evs []eventlog.Event) []eventlog.Event {
	latest := map[string]eventlog.Event{}
	for _, e := range evs {
		if e.Reason != "FailedMount" && e.Reason != "FailedMapVolume" {
			continue
		}
		m := volumeOp.FindStringSubmatch(e.Message)
		if m == nil || strings.HasPrefix(m[1], "AttachVolume") {
			continue
		}
		if old, ok := latest[m[2]]; !ok || !e.Last.Before(old.Last) {
			latest[m[2]] = e
		}
	}
	out := make([]eventlog.Event, 0, len(latest))
	for _, e := range latest {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Last.Before(out[j].Last) })
	return out
}

// latestWith is the latest event of reason (any when empty) whose message
// contains sub.
func latestWith(evs []eventlog.Event, reason, sub string) (eventlog.Event, bool) {
	var best eventlog.Event
	found := false
	for _, e := range evs {
		if (reason == "" || e.Reason == reason) && strings.Contains(e.Message, sub) && (!found || !e.Last.Before(best.Last)) {
			best, found = e, true
		}
	}
	return best, found
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}
