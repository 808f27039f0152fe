package deploytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// nodeNameExtra is the user extra that a token bound to a pod carries:
// the name of the pod's node (Kubernetes 1.32+).
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// agentIdentity is nodemend-agent as it runs on one node: a token bound to
// an agent pod on that node, and clients that use only that token.
type agentIdentity struct {
	node  string
	token string
	core  kubernetes.Interface
	dyn   dynamic.Interface
}

// agentOn creates the node (with kubelet-owned conditions and a nodemend
// condition), an agent pod bound to it, and a token bound to that pod, as
// the kubelet requests for the pod's projected volume.
func agentOn(t *testing.T, node string) agentIdentity {
	t.Helper()
	ctx := t.Context()
	n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{"kubernetes.io/hostname": node}}}, metav1.CreateOptions{}))
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: "KernelReady", Status: corev1.ConditionTrue, Reason: "KernelIsReady", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resourceQuantity("110")}
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}))
	pod := Must[*corev1.Pod](t)(admin.CoreV1().Pods(Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nodemend-agent-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "nodemend-agent",
			Containers: []corev1.Container{{Name: "agent", Image: "nodemend-agent"}}},
	}, metav1.CreateOptions{}))
	tr := Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "nodemend-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{}))
	return identityFromToken(t, node, tr.Status.Token)
}

func identityFromToken(t *testing.T, node, token string) agentIdentity {
	t.Helper()
	cfg := configFor(token)
	return agentIdentity{node: node, token: token, core: Must[*kubernetes.Clientset](t)(kubernetes.NewForConfig(cfg)),
		dyn: Must[*dynamic.DynamicClient](t)(dynamic.NewForConfig(cfg))}
}

type authTokenRequest = authenticationv1.TokenRequest

// userExtra asks the API server who the agent is and returns the user's
// extra fields.
func userExtra(ctx context.Context, a agentIdentity) (map[string][]string, error) {
	r, err := a.core.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	extra := map[string][]string{}
	for k, v := range r.Status.UserInfo.Extra {
		extra[k] = v
	}
	return extra, nil
}

// patchConditions patches node's status.conditions the way the agent's
// exporter does (strategic merge, keyed by type).
func (a agentIdentity) patchConditions(ctx context.Context, node string, conds ...map[string]any) error {
	return a.patchStatus(ctx, node, map[string]any{"status": map[string]any{"conditions": conds}})
}

func (a agentIdentity) patchStatus(ctx context.Context, node string, patch map[string]any) error {
	_, err := a.core.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, mustJSON(patch),
		metav1.PatchOptions{FieldManager: "nodemend-agent"}, "status")
	return err
}

func condition(typ, status, reason string) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": "test",
		"lastHeartbeatTime": now, "lastTransitionTime": now}
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
}

func bearerToken(t *testing.T, a agentIdentity) string {
	t.Helper()
	if a.token == "" {
		t.Fatal("no token")
	}
	return a.token
}
