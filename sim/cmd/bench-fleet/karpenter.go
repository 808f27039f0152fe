package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/sim"
)

// karpenterTolerationFor is how long Karpenter's kwok provider tolerates
// Ready=False before it repairs (its RepairPolicies; not configurable).
// The nodemend run on the same storm uses the same toleration.
const karpenterTolerationFor = 10 * time.Minute

// instanceType is the kwok provider's smallest Linux instance type.
const instanceType = "c-1x-amd64-linux"

// notReadyTaint is the taint the API server's TaintNodesByCondition
// admission puts on a new node. kube-controller-manager removes it once the
// node is Ready; the benchmark runs none, and Karpenter waits for it to go
// before it counts a node initialized.
const notReadyTaint = "node.kubernetes.io/not-ready"

// createKarpenterFleet makes c.nodes nodes that Karpenter owns: a NodePool
// per pool (no consolidation, no expiry, the default disruption budget of
// 10%) and NodeClaims created as its provisioner would, which Karpenter
// launches through its kwok provider. It returns once every NodeClaim is
// initialized, with node → pool.
func createKarpenterFleet(ctx context.Context, s *sim.Sim, c config) (map[string]string, error) {
	for p := range c.pools {
		if err := s.Apply(ctx, sim.NodePool(poolName(p), instanceType, map[string]string{benchLabel: "true"})); err != nil {
			return nil, err
		}
	}
	claims := make([]string, c.nodes)
	for i := range claims {
		claims[i] = fmt.Sprintf("bench-p%02d-%05d", i%c.pools, i)
	}
	nodeClaims := s.Dynamic.Resource(sim.NodeClaimGVR)
	err := parallel(ctx, 16, claims, func(ctx context.Context, i int, name string) error {
		pool := poolName(i % c.pools)
		claim := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
			"metadata": map[string]any{"name": name, "labels": map[string]any{
				"karpenter.sh/nodepool": pool, poolLabel: pool, benchLabel: "true",
			}},
			"spec": map[string]any{
				"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": sim.NodeClassName},
				"expireAfter":  "Never",
				"requirements": []any{
					map[string]any{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": []any{instanceType}},
					map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []any{"on-demand"}},
					map[string]any{"key": "karpenter.sh/nodepool", "operator": "In", "values": []any{pool}},
				},
			},
		}}
		_, err := nodeClaims.Create(ctx, claim, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating NodeClaims: %w", err)
	}
	return waitInitialized(ctx, s.Client, s.Dynamic, c.nodes)
}

func poolName(p int) string { return fmt.Sprintf("p%02d", p) }

// waitInitialized waits until want NodeClaims are Initialized and returns
// their nodes' pools. Meanwhile it does kube-controller-manager's one job
// the benchmark needs: lifting the not-ready taint from Ready nodes.
func waitInitialized(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, want int) (map[string]string, error) {
	pools := map[string]string{}
	last := -1
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := liftNotReadyTaints(ctx, cs); err != nil {
			say("  lifting not-ready taints: %v", err)
		}
		list, err := dc.Resource(sim.NodeClaimGVR).List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true", ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		clear(pools)
		for _, u := range list.Items {
			node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
			if node != "" && conditionStatus(&u, "Initialized") == "True" {
				pools[node] = u.GetLabels()["karpenter.sh/nodepool"]
			}
		}
		if len(pools) != last {
			say("  %d/%d NodeClaims initialized", len(pools), want)
			last = len(pools)
		}
		return len(pools) >= want, nil
	})
	return pools, err
}

// liftNotReadyTaints removes the not-ready taint from bench nodes that are
// Ready.
func liftNotReadyTaints(ctx context.Context, cs kubernetes.Interface) error {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true", ResourceVersion: "0"})
	if err != nil {
		return err
	}
	var due []corev1.Node
	for _, n := range list.Items {
		if nodeReady(&n) == corev1.ConditionTrue && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == notReadyTaint }) {
			due = append(due, n)
		}
	}
	names := make([]string, len(due))
	for i := range due {
		names[i] = due[i].Name
	}
	return parallel(ctx, 16, names, func(ctx context.Context, i int, name string) error {
		n := &due[i]
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == notReadyTaint })
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return err
		}
		return nil // a conflict is retried on the next poll
	})
}

// stopHeartbeats makes kwok leave nodes alone, as if their kubelets died.
func stopHeartbeats(ctx context.Context, cs kubernetes.Interface, nodes []string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, sim.HeartbeatStoppedAnnotation)
	return parallel(ctx, 16, nodes, func(ctx context.Context, _ int, name string) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// markNotReady writes Ready=False as the node lifecycle controller would for
// a kubelet that reports itself not ready, with ltt as its transition time.
func markNotReady(ctx context.Context, cs kubernetes.Interface, nodes []string, ltt time.Time) error {
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message:            "container runtime network not ready: NetworkReady=false",
		LastTransitionTime: metav1.NewTime(ltt), LastHeartbeatTime: now,
	}}}})
	return parallel(ctx, 16, nodes, func(ctx context.Context, _ int, name string) error {
		_, err := cs.CoreV1().Nodes().PatchStatus(ctx, name, patch)
		return err
	})
}

// watchNodeClaimDeletions records, for Karpenter's own repair, when each
// sick node's NodeClaim was marked for deletion: its decision.
func (w *stormWatch) watchNodeClaimDeletions(ctx context.Context, dc dynamic.Interface) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, "", func(o *metav1.ListOptions) {
		o.LabelSelector = benchLabel + "=true"
	})
	inf := f.ForResource(sim.NodeClaimGVR).Informer()
	seen := func(o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() == nil {
			return
		}
		node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
		w.decide(node)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, o any) { seen(o) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	return nil
}

func conditionStatus(u *unstructured.Unstructured, t string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == t {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
