package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"nodemend.dev/nodemend/pkg/cli/explain"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// coreEvent writes a core/v1 Event as record.EventRecorder writes them
// (the kubelet, Karpenter, the attach/detach controller all do).
func coreEvent(t *testing.T, ns, kind, name, source, typ, reason, msg string) {
	t.Helper()
	now := metav1.Now()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%d", name, eventSeq.Add(1))},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name},
		Reason:         reason, Message: msg, Type: typ, Source: corev1.EventSource{Component: source},
		FirstTimestamp: now, LastTimestamp: now, Count: 1}
	if kind == "Node" || kind == "NodePool" || kind == "NodeClaim" {
		e.InvolvedObject.Namespace = ""
	}
	if _, err := core.CoreV1().Events(ns).Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func dyn(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// createUnstructured creates obj and then writes its status, as the
// engine's controller would.
func createUnstructured(t *testing.T, d dynamic.Interface, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	ctx := context.Background()
	gvr := nodePoolGVR
	if obj.GetKind() == "NodeClaim" {
		gvr = nodeClaimGVR
	}
	created, err := d.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Resource(gvr).Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	if status != nil {
		created.Object["status"] = status
		if _, err := d.Resource(gvr).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func nodeClassRef() map[string]any {
	return map[string]any{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
}

func karpenterRequirements() []any {
	return []any{map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []any{"on-demand"}}}
}

func explainJSON(t *testing.T, args ...string) explain.Report {
	t.Helper()
	out, err := run(t, append([]string{"--kubeconfig", kubeconfig(t, cfg)}, append(args, "-o", "json")...)...)
	if err != nil {
		t.Fatal(err)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func condTime() string { return time.Now().UTC().Format(time.RFC3339) }

// TestExplainPod covers the causes that the local cluster cannot produce
// with a real component (no kubelet, no Karpenter, no cloud): objects and
// events are written in the exact form those components write.
func TestExplainPod(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-pod")
	d := dyn(t)
	createNode(t, testNode{name: "ex-arm", labels: map[string]string{corev1.LabelArchStable: "arm64"}})
	createNode(t, testNode{name: "ex-new", labels: map[string]string{karpenter.NodePoolLabel: "expool"},
		taints:     []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionFalse, time.Now())}})
	// Karpenter's NodeClaim whose launch failed for lack of subnet addresses
	// (Launched=False/LaunchFailed carries the cloud provider's error).
	createUnstructured(t, d, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
		"metadata": map[string]any{"name": "expool-abcde", "labels": map[string]any{karpenter.NodePoolLabel: "expool"}},
		"spec":     map[string]any{"nodeClassRef": nodeClassRef(), "requirements": karpenterRequirements()},
	}}, map[string]any{"conditions": []any{map[string]any{"type": "Launched", "status": "False", "reason": "LaunchFailed", "lastTransitionTime": condTime(),
		"message": "creating instance, insufficient capacity, with fleet error(s), InsufficientFreeAddressesInSubnet: There are not enough free addresses in subnet 'subnet-0a1b' to satisfy the requested number of instances."}}})

	mkPod := func(name string, mut func(*corev1.Pod)) {
		p := pausePod(ns, name)
		if mut != nil {
			mut(p)
		}
		created, err := core.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != "" {
			created.Status = p.Status
			if _, err := core.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// OOMKilled: the kubelet's container status.
	mkPod("oom", func(p *corev1.Pod) {
		p.Spec.NodeName = "ex-arm"
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 4,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}
	})
	// Image platform: the kubelet's "Failed" event with containerd's error.
	mkPod("platform", func(p *corev1.Pod) { p.Spec.NodeName = "ex-arm" })
	coreEvent(t, ns, "Pod", "platform", "kubelet", "Warning", "Failed",
		`Failed to pull image "example.com/app:1.0": rpc error: code = NotFound desc = failed to pull and unpack image "example.com/app:1.0": no match for platform in manifest: not found`)
	// Karpenter: incompatible with every NodePool.
	mkPod("nopool", nil)
	coreEvent(t, ns, "Pod", "nopool", "karpenter", "Warning", "FailedScheduling",
		`Failed to schedule pod, incompatible with nodepool "expool", daemonset overhead={"cpu":"150m","pods":"2"}, incompatible requirements, key karpenter.sh/capacity-type, karpenter.sh/capacity-type In [spot] not in karpenter.sh/capacity-type In [on-demand]; incompatible with nodepool "gpu", daemonset overhead={"cpu":"150m","pods":"2"}, did not tolerate nvidia.com/gpu=true:NoSchedule`)
	// Karpenter nominated a NodeClaim that cannot launch (subnet exhausted).
	mkPod("nominated", nil)
	coreEvent(t, ns, "Pod", "nominated", "karpenter", "Normal", "Nominated", "Pod should schedule on: nodeclaim/expool-abcde")
	// Scheduled to a node still initializing.
	mkPod("uninit", func(p *corev1.Pod) { p.Spec.NodeName = "ex-new"; p.Status.Phase = corev1.PodPending })
	// In-tree StorageClass.
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "ex-gp2"}, Provisioner: "kubernetes.io/aws-ebs"}
	if _, err := core.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.StorageV1().StorageClasses().Delete(context.Background(), "ex-gp2", metav1.DeleteOptions{})
	})
	scName := "ex-gp2"
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: &scName, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mkPod("intree", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	})
	// Attach limit: the attach/detach controller's FailedAttachVolume
	// with the EBS CSI driver's ResourceExhausted error
	// (aws-ebs-csi-driver pkg/driver/controller.go).
	mkPod("attach", func(p *corev1.Pod) { p.Spec.NodeName = "ex-arm" })
	coreEvent(t, ns, "Pod", "attach", "attachdetach-controller", "Warning", "FailedAttachVolume",
		`AttachVolume.Attach failed for volume "pvc-1234" : rpc error: code = ResourceExhausted desc = Attachment limit exceeded for volume "vol-0abc" on node "i-0def": limit exceeded`)
	// Subnet exhaustion seen by the CNI on the node.
	mkPod("noip", func(p *corev1.Pod) { p.Spec.NodeName = "ex-arm" })
	coreEvent(t, ns, "Pod", "noip", "kubelet", "Warning", "FailedCreatePodSandBox",
		`Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "14bf": plugin type="aws-cni" name="aws-cni" failed (add): add cmd: failed to assign an IP address to container`)

	cases := []struct{ pod, want string }{
		{"oom", "container c was OOMKilled (4 restarts)"},
		{"platform", "an image has no variant for the node's platform"},
		{"nopool", "incompatible with every NodePool"},
		{"nominated", "the subnets of NodeClaim expool-abcde have no free IP addresses"},
		{"uninit", "node ex-new is not initialized: startup taints are still present"},
		{"uninit", "node ex-new is not Ready"},
		{"intree", "removed in-tree provisioner kubernetes.io/aws-ebs"},
		{"attach", "node ex-arm reached its volume attach limit"},
		{"noip", "cannot give the pod an IP address"},
	}
	for _, tc := range cases {
		t.Run(tc.pod+"/"+tc.want, func(t *testing.T) {
			r := explainJSON(t, "-n", ns, "explain", "pod/"+tc.pod)
			if !hasCause(r, tc.want) {
				t.Errorf("no %q in %+v", tc.want, r.Findings)
			}
		})
	}
}

// TestExplainNode: what keeps a node from being repaired or consolidated.
func TestExplainNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "explain-node")
	name := "ex-node"
	createNode(t, testNode{name: name, labels: map[string]string{karpenter.NodePoolLabel: "exn"},
		annotations: map[string]string{record.VetoAnnotation: "INC-42 investigating", "karpenter.sh/do-not-disrupt": "true"},
		conditions: []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, time.Now().Add(-time.Hour)),
			condition("KernelReady", corev1.ConditionFalse, "ForkFailedOutOfPIDs", "fork failed", time.Now().Add(-2*time.Hour))}})
	for i := range 5 {
		createNode(t, testNode{name: fmt.Sprintf("ex-node-ok-%d", i), labels: map[string]string{karpenter.NodePoolLabel: "exn"}})
	}
	pod := func(name string, mut func(*corev1.Pod)) {
		p := pausePod(ns, name)
		p.Spec.NodeName = "ex-node"
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u1", Controller: ptrTrue()}}
		if mut != nil {
			mut(p)
		}
		if _, err := core.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("batch", func(p *corev1.Pod) { p.Annotations = map[string]string{"karpenter.sh/do-not-disrupt": "true"} })
	pod("orphan", func(p *corev1.Pod) { p.OwnerReferences = nil })
	pod("db-0", func(p *corev1.Pod) { p.Labels["app"] = "db" })
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	created, err := core.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The disruption controller's status: one healthy pod, none may go.
	created.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1, DisruptionsAllowed: 0, ObservedGeneration: created.Generation}
	if _, err := core.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Karpenter's disruption events on the node (pkg/controllers/disruption/events).
	coreEvent(t, "default", "Node", name, "karpenter", "Normal", "DisruptionBlocked", fmt.Sprintf("Pdb prevents pod evictions (PodDisruptionBudget=[%s/db])", ns))
	coreEvent(t, "default", "Node", name, "karpenter", "Normal", "Unconsolidatable", "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")

	r := explainJSON(t, "explain", "node/"+name)
	for _, want := range []string{
		"KernelReady=False (ForkFailedOutOfPIDs)",
		"repair vetoed: the node has the nodemend.dev/do-not-repair annotation (INC-42 investigating)",
		"the node has karpenter.sh/do-not-disrupt=true",
		"1 pod(s) have karpenter.sh/do-not-disrupt=true",
		"1 PodDisruptionBudget(s) allow no disruption now",
		"1 pod(s) have no controller",
		"Karpenter does not disrupt the node: SpotToSpotConsolidation is disabled",
	} {
		if !hasCause(r, want) {
			t.Errorf("no %q in %+v", want, r.Findings)
		}
	}
	if _, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "explain", "node/no-such-node"); err == nil {
		t.Error("unknown node explained")
	}
	if _, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "explain", "deployment/x"); err == nil {
		t.Error("deployment accepted")
	}
}

func ptrTrue() *bool { b := true; return &b }

// TestExplainNodePool: limits reached, a NodeClaim failing to launch, and
// nodemend's gate closed for the pool.
func TestExplainNodePool(t *testing.T) {
	d := dyn(t)
	createUnstructured(t, d, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "exgpu"},
		"spec": map[string]any{"limits": map[string]any{"cpu": "64"}, "template": map[string]any{"spec": map[string]any{
			"nodeClassRef": nodeClassRef(), "requirements": karpenterRequirements()}}},
	}}, map[string]any{"resources": map[string]any{"cpu": "64"}, "conditions": []any{
		map[string]any{"type": "Ready", "status": "False", "reason": "NodeClassNotReady", "message": "NodeClass not ready", "lastTransitionTime": condTime()}}})
	createUnstructured(t, d, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
		"metadata": map[string]any{"name": "exgpu-q1w2e", "labels": map[string]any{karpenter.NodePoolLabel: "exgpu"}},
		"spec":     map[string]any{"nodeClassRef": nodeClassRef(), "requirements": karpenterRequirements()},
	}}, map[string]any{"conditions": []any{map[string]any{"type": "Launched", "status": "False", "reason": "LaunchFailed", "lastTransitionTime": condTime(),
		"message": "creating instance, insufficient capacity, with fleet error(s), InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity"}}})
	bad := []corev1.NodeCondition{readyCondition(corev1.ConditionTrue, time.Now().Add(-time.Hour)),
		condition("AcceleratedHardwareReady", corev1.ConditionFalse, "NvidiaXID79Error", "fell off the bus", time.Now().Add(-time.Hour))}
	createNode(t, testNode{name: "exgpu-1", labels: map[string]string{karpenter.NodePoolLabel: "exgpu"}, conditions: bad})
	createNode(t, testNode{name: "exgpu-2", labels: map[string]string{karpenter.NodePoolLabel: "exgpu"}, conditions: bad})
	createNode(t, testNode{name: "exgpu-3", labels: map[string]string{karpenter.NodePoolLabel: "exgpu"}})

	r := explainJSON(t, "explain", "nodepool/exgpu")
	for _, want := range []string{
		"NodePool condition Ready=False (NodeClassNotReady)",
		"the NodePool reached its cpu limit (64 of 64)",
		"the cloud has no capacity for NodeClaim exgpu-q1w2e",
		"nodemend's safety gate is closed for this pool: 2 of 3 nodes unhealthy, 1 allowed",
	} {
		if !hasCause(r, want) {
			t.Errorf("no %q in %+v", want, r.Findings)
		}
	}
}
