//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/sim"
)

const (
	outOfServiceTaint = "node.kubernetes.io/out-of-service"
	// attachManaged is what a kubelet writes on its Node (it does by
	// default) for the controller-manager's attach/detach controller to
	// attach and detach the node's volumes; kwok does not write it.
	attachManaged = "volumes.kubernetes.io/controller-managed-attach-detach"
	deadNS        = "e2e-dead-node"
	deadPV        = "e2e-dead-node-data"
	deadDriver    = "dead-node.e2e.nodemend.dev"
)

// A node no engine owns whose kubelet and agent die with a StatefulSet's
// pod and its CSI volume on it: the kubelet's Ready goes Unknown (the real
// node lifecycle controller), the ladder skips the Reboot its silent agent
// cannot carry out and quarantines the node; after the drain deadline the
// controller puts node.kubernetes.io/out-of-service on it, the real
// controller-manager's pod GC force-deletes the pod stuck terminating (the
// drain's eviction can never finish on a dead kubelet), its attach/detach
// controller deletes the VolumeAttachment for the dead node, the
// StatefulSet's pod is recreated on the other node and a VolumeAttachment
// is created there. When the kubelet comes back the taint comes off; the
// quarantine stays for a person.
//
// What is simulated: the kubelet's death (kwok stops acting for the node:
// its heartbeat stage is stopped and its node Lease taken by another
// holder, so kwok neither renews it nor touches the node's pods); the
// agent's silence, dated back past the controller's --agent-silence bound
// (its default, 15 minutes: no bound under 6 minutes is accepted, and a
// real host stays silent that long);
// and the CSI driver's attacher — none runs: the test marks the volume's
// VolumeAttachment to the node attached (status.attached), as the
// external-attacher would, so that the attach/detach controller's attach
// completes (else it stays pending for its 2-minute timeout, and the
// controller detaches nothing of a volume while an attach of it is
// pending). The test shows the controllers' objects, not a volume's data.
func TestDeadQuarantinedNodeReleasesItsVolume(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	const (
		node   = "e2e-dead"
		spare  = "e2e-dead-spare"
		policy = "e2e-dead-node"
		pool   = "e2e.nodemend.dev/dead-node-pool"
	)
	label := policyLabel(policy)
	if err := cluster.Apply(ctx, ownPolicy(policy, `  rules:
  # The kubelet is gone: the node lifecycle controller's verdict.
  - {conditionType: Ready, status: Unknown, toleration: 5s}
  drain:
    mode: Evict
    # Short: the out-of-service taint waits for it.
    deadline: 10s
  ladder:
  - {action: Reboot, attempts: 1, timeout: 1m}
  - action: Quarantine
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: `+deadDriver+`
spec:
  attachRequired: true
  podInfoOnMount: false
---
apiVersion: v1
kind: Namespace
metadata:
  name: `+deadNS+`
---
# Pre-bound to the StatefulSet's claim: no provisioner runs.
apiVersion: v1
kind: PersistentVolume
metadata:
  name: `+deadPV+`
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: `+deadNS+`, name: data-db-0}
  csi: {driver: `+deadDriver+`, volumeHandle: vol-e2e-dead-node}
`)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cluster.Client.CoreV1().Namespaces().Delete(bg, deadNS, metav1.DeleteOptions{})
		_ = cluster.Client.CoreV1().PersistentVolumes().Delete(bg, deadPV, metav1.DeleteOptions{})
		_ = cluster.Client.StorageV1().CSIDrivers().Delete(bg, deadDriver, metav1.DeleteOptions{})
		_ = cluster.Dynamic.Resource(sim.NodeRepairPolicyG).Delete(bg, policy, metav1.DeleteOptions{})
		for _, va := range attachments(bg, t, "") {
			_ = cluster.Client.StorageV1().VolumeAttachments().Delete(bg, va, metav1.DeleteOptions{})
		}
	})
	// The spare starts cordoned, so that the pod lands on the node that dies.
	// Both nodes in a zone and a pool of the test's own.
	host := attachNode(ctx, t, node, map[string]string{label: "true", pool: "true", corev1.LabelTopologyZone: policy, plainPool: policy}, false)
	attachNode(ctx, t, spare, map[string]string{pool: "true", corev1.LabelTopologyZone: policy, plainPool: policy}, true)
	if err := cluster.Apply(ctx, `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: `+deadNS+`
spec:
  replicas: 1
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      nodeSelector: {`+pool+`: "true"}
      terminationGracePeriodSeconds: 5
      containers:
      - name: db
        image: registry.example/db:1.0
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: ""
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`); err != nil {
		t.Fatal(err)
	}
	first := waitPod(ctx, t, "the StatefulSet's pod running on "+node, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
	})
	waitAttachments(ctx, t, "a VolumeAttachment of the volume to "+node, func(on []string) bool { return slices.Contains(on, node) })
	markAttached(ctx, t, node)

	// The host dies: kubelet and agent.
	t0 := time.Now()
	killKubelet(ctx, t, node)
	host.Agent.Kill()
	silence(ctx, t, node, 16*time.Minute)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, spare, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = false
		_, err = cluster.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	waitNode(ctx, t, node, "Ready Unknown (the node lifecycle controller)", func(n *corev1.Node) bool {
		return conditionIs(n, "Ready", corev1.ConditionUnknown)
	})
	unknown := time.Since(t0)
	waitEvent(ctx, t, node, "NodeRemediationFailed", "Reboot skipped: the node's agent carries them out and its agent's last heartbeat was")
	waitEvent(ctx, t, node, "NodeQuarantined", "")
	quarantined := time.Since(t0)
	if orders := ordersFor(ctx, t, node); orders != "" {
		t.Errorf("orders for the dead node: %q, want none (its agent is silent)", orders)
	}
	waitNode(ctx, t, node, "tainted out of service", func(n *corev1.Node) bool { return hasTaint(n, outOfServiceTaint) })
	tainted := time.Since(t0)
	waitEvent(ctx, t, node, "NodeOutOfService", "")

	// The controller-manager's work: the old pod force-deleted, the
	// volume detached from the dead node, the pod recreated on the spare
	// and the volume attached there.
	moved := waitPod(ctx, t, "the StatefulSet's pod recreated on "+spare, func(p *corev1.Pod) bool {
		return p.UID != first.UID && p.Spec.NodeName == spare && p.Status.Phase == corev1.PodRunning
	})
	waitAttachments(ctx, t, "the volume's VolumeAttachment to "+node+" deleted, one to "+spare+" created", func(on []string) bool {
		return !slices.Contains(on, node) && slices.Contains(on, spare)
	})
	movedAt := time.Since(t0)
	if moved.Spec.Volumes[0].PersistentVolumeClaim == nil || moved.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data-db-0" {
		t.Errorf("recreated pod's volumes: %+v, want the claim data-db-0", moved.Spec.Volumes)
	}

	// The kubelet comes back: the out-of-service taint comes off, the
	// quarantine (repair taint, cordon) stays.
	reviveKubelet(ctx, t, node)
	back := waitNode(ctx, t, node, "Ready again without the out-of-service taint", func(n *corev1.Node) bool {
		return conditionIs(n, "Ready", corev1.ConditionTrue) && !hasTaint(n, outOfServiceTaint)
	})
	if !hasTaint(back, "nodemend.dev/repair") || !back.Spec.Unschedulable {
		t.Errorf("quarantine lifted with the out-of-service taint: taints %v, unschedulable %v", back.Spec.Taints, back.Spec.Unschedulable)
	}
	waitEvent(ctx, t, node, "NodeOutOfServiceLifted", "")
	t.Logf("FIGURE dead node: host dies → Ready Unknown %s, → quarantined %s, → out-of-service %s, → pod and volume on the spare %s, → back, taint off %s",
		unknown.Round(100*time.Millisecond), quarantined.Round(100*time.Millisecond), tainted.Round(100*time.Millisecond),
		movedAt.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
}

// attachNode creates a kwok node no engine owns with labels and the
// attach/detach controller's annotation, cordoned if asked, and returns its
// simulated host once it is Ready and its agent reports.
func attachNode(ctx context.Context, t *testing.T, node string, labels map[string]string, cordoned bool) *sim.Host {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        node,
			Annotations: map[string]string{sim.KwokAnnotation: "fake", attachManaged: "true"},
			Labels:      map[string]string{"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"},
		},
		Spec: corev1.NodeSpec{Unschedulable: cordoned},
	}
	for k, v := range labels {
		n.Labels[k] = v
	}
	if _, err := cluster.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	host, err := cluster.Host(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node, "Ready, its agent reporting", func(n *corev1.Node) bool {
		return conditionIs(n, "Ready", corev1.ConditionTrue) && conditionIs(n, string(kernelCondition), corev1.ConditionTrue)
	})
	return host
}

// killKubelet makes kwok stop acting as node's kubelet: the heartbeat
// stage first (kwok drops the node's pending heartbeat once a stage
// matches it, sim.HeartbeatStoppedAnnotation), then the node's Lease is
// taken by another holder for an hour, so that kwok no longer holds it: it
// neither renews it nor handles the node or its pods.
//
// The takeover is written as a renewal (renewTime now), the last one the
// node lifecycle controller sees: Ready goes Unknown one
// --node-monitor-grace-period (50 s) later. A takeover that left renewTime
// as it was never let it: kube-controller-manager 1.37's lease circuit
// breaker (NodeControllerLeaseCircuitBreaker, beta, on) re-reads a Lease
// that looks expired and takes a resourceVersion other than the one it
// last saw as its own cache being stale, but saves a Lease only when its
// renewTime moves on — so a Lease changed without a renewal looks stale to
// it forever, and the node stays Ready.
func killKubelet(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, sim.HeartbeatStoppedAnnotation)
	if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// kwok must see the annotation while it still acts for the node: once
	// the Lease is gone it ignores the node's events, and would keep a
	// pending heartbeat.
	time.Sleep(2 * time.Second)
	setLeaseHolder(ctx, t, node, "e2e-kubelet-gone", 3600, true)
}

// reviveKubelet undoes killKubelet: kwok takes the free Lease back (it
// retries every quarter of its lease duration) and acts for the node again.
func reviveKubelet(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, sim.HeartbeatStoppedAnnotation)
	if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	setLeaseHolder(ctx, t, node, "", 0, false)
}

// setLeaseHolder sets the holder of node's Lease (none: "") and its
// duration, and renews it now if asked (else leaves its renew time).
func setLeaseHolder(ctx context.Context, t *testing.T, node, holder string, seconds int32, renew bool) {
	t.Helper()
	leases := cluster.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = nil
		if holder != "" {
			l.Spec.HolderIdentity = &holder
			l.Spec.LeaseDurationSeconds = &seconds
		}
		if renew {
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// silence dates the heartbeats of the conditions node's agent writes back
// by ago, as if the agent had died then.
func silence(ctx context.Context, t *testing.T, node string, ago time.Duration) {
	t.Helper()
	at := metav1.NewTime(time.Now().Add(-ago))
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		owned := 0
		for i, c := range n.Status.Conditions {
			if health.IsOwned(string(c.Type)) {
				n.Status.Conditions[i].LastHeartbeatTime = at
				owned++
			}
		}
		if owned == 0 {
			return fmt.Errorf("node %s has no condition its agent writes", node)
		}
		_, err = cluster.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// waitPod waits up to 3 minutes for the StatefulSet's pod db-0 to satisfy
// ok, and returns it.
func waitPod(ctx context.Context, t *testing.T, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := cluster.Client.CoreV1().Pods(deadNS).Get(ctx, "db-0", metav1.GetOptions{})
		if err == nil && ok(p) {
			return p
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			state := fmt.Sprint(err)
			if p != nil && err == nil {
				state = fmt.Sprintf("uid %s on %q, phase %s, deleting since %v", p.UID, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp)
			}
			t.Fatalf("not %s: pod db-0 %s; the volume attached to %v", what, state, attachments(ctx, t, deadPV))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAttachments waits up to 4 minutes until the nodes the volume has a
// VolumeAttachment to satisfy ok (an attach nobody marks attached is
// pending for 2 minutes: markAttached).
func waitAttachments(ctx context.Context, t *testing.T, what string, ok func(nodes []string) bool) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		on := attachments(ctx, t, deadPV)
		if ok(on) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("not %s: VolumeAttachments to %v", what, on)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// markAttached does the CSI external-attacher's part for the volume's
// VolumeAttachment to node: status.attached.
func markAttached(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	vas := cluster.Client.StorageV1().VolumeAttachments()
	list, err := vas.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, va := range list.Items {
		if src := va.Spec.Source.PersistentVolumeName; va.Spec.Attacher != deadDriver || va.Spec.NodeName != node || src == nil || *src != deadPV {
			continue
		}
		va.Status.Attached = true
		if _, err := vas.UpdateStatus(ctx, &va, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no VolumeAttachment of %s to %s", deadPV, node)
}

// attachments lists the nodes with a VolumeAttachment of pv (""; the
// names of every VolumeAttachment of the test's driver).
func attachments(ctx context.Context, t *testing.T, pv string) []string {
	t.Helper()
	list, err := cluster.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing VolumeAttachments: %v", err)
		return nil
	}
	var out []string
	for _, va := range list.Items {
		if va.Spec.Attacher != deadDriver {
			continue
		}
		src := va.Spec.Source.PersistentVolumeName
		switch {
		case pv == "":
			out = append(out, va.Name)
		case src != nil && *src == pv && va.DeletionTimestamp == nil:
			out = append(out, va.Spec.NodeName)
		}
	}
	return out
}
