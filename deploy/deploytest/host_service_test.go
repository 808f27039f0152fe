package deploytest

import (
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The dedicated identity docs/security.md recommends for an agent run as a
// host service: a nodemend-agent token bound to the Node object (there is
// no pod). It carries the node's name as a pod-bound token does, so the
// same lanes hold: its own node's conditions and events, nobody else's.
func TestNodeBoundTokenStaysInTheAgentsLane(t *testing.T) {
	ctx := t.Context()
	agentOn(t, "host-a")
	b := agentOn(t, "host-b")
	n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Get(ctx, "host-a", metav1.GetOptions{}))
	tr := Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "nodemend-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
		}}, metav1.CreateOptions{}))
	a := identityFromToken(t, "host-a", tr.Status.Token)
	extra := Must[map[string][]string](t)(userExtra(ctx, a))
	if got := extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != "host-a" {
		t.Fatalf("a node-bound token's node name: %v", got)
	}
	waitForPolicy(t, a, b.node)

	if err := a.patchConditions(ctx, "host-a", condition("KernelReady", "False", "KernelDeadlock")); err != nil {
		t.Errorf("its own node's condition: refused: %v", err)
	}
	if err := a.patchConditions(ctx, "host-a", condition("Ready", "False", "KubeletNotReady")); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("the kubelet's Ready: %v, want refused", err)
	}
	if _, err := a.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, agentCoreEvent("host-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("an event about its own node: refused: %v", err)
	}
	e := agentCoreEvent("host-a")
	e.InvolvedObject.Name = "host-b"
	if _, err := a.core.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "may only record events about its own Node") {
		t.Errorf("an event about host-b: %v, want refused", err)
	}
}
