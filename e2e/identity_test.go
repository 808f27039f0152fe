//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The agents of the simulation run as the shipped manifests make them run:
// the agent ServiceAccount with a token bound to the DaemonSet pod on the
// node. With that identity an agent writes its own node's conditions (the
// setup waits for them) and nothing else: another node's status, and the
// kubelet's conditions on its own node, are refused by the admission policy.
func TestAgentsAreConfinedToTheirNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc := scenario{pool: "e2e-identity", replicas: 2, maxUnavail: 1, condition: gpuCondition, toleration: "40m", deadline: "1m", gate: "100%"}
	nodes := sc.setUp(ctx, t)
	own, other := nodes[0], nodes[1]
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AgentKubeconfig(own))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(node string, c corev1.NodeCondition) error {
		c.LastTransitionTime, c.LastHeartbeatTime = metav1.Now(), metav1.Now()
		data, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
		_, err := agent.CoreV1().Nodes().PatchStatus(ctx, node, data)
		return err
	}
	for _, tc := range []struct {
		name string
		node string
		cond corev1.NodeCondition
	}{
		{"another node's condition", other, corev1.NodeCondition{Type: gpuCondition, Status: corev1.ConditionFalse, Reason: "NvidiaXID79Error"}},
		{"the kubelet's Ready on its own node", own, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}},
	} {
		err := patch(tc.node, tc.cond)
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: the agent of %s was not refused: %v", tc.name, own, err)
		}
	}
	if _, err := agent.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{}); err != nil {
		t.Errorf("the agent cannot read its own node: %v", err)
	}
	if err := agent.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting another node was not refused: %v", err)
	}
}
