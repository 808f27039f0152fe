package deploytest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// The two-step bypass, as a class: a guard is no guard if the identity it
// guards against can first write the state the guard reads. For every
// guarded operation and every identity that might try it — the controller's
// ServiceAccount, the node's own kubelet (Node authorizer and
// NodeRestriction), another node's agent, an admin of the release
// namespace, a token bound to nothing — the test first writes every
// precondition that identity may write (repair records naming every target,
// the repair taint, the old release's phase and cordon keys, a person's
// acts, the node's status where it may write it), then attempts the
// operation on a healthy node a person cordoned. Each must be refused.
// TestTheLegitimatePathPasses shows the same operations admitted once the
// evidence is real.

var (
	nodeClaimGVR   = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	machineGVR     = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	remediationGVR = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderemediations"}
)

const capiNamespace = "capi"

// actor is an identity with clients that use only its credentials.
type actor struct {
	name string
	core kubernetes.Interface
	dyn  dynamic.Interface
}

func actorFrom(t *testing.T, name string, cfg *rest.Config) actor {
	t.Helper()
	return actor{name: name, core: Must[*kubernetes.Clientset](t)(kubernetes.NewForConfig(cfg)),
		dyn: Must[*dynamic.DynamicClient](t)(dynamic.NewForConfig(cfg))}
}

// impersonated acts as user (the admin's credentials, impersonating: the
// authorizer and admission see only the user).
func impersonated(t *testing.T, name, user string, groups ...string) actor {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	return actorFrom(t, name, cfg)
}

func controllerActor(t *testing.T) actor {
	t.Helper()
	tr := Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(t.Context(), "nodemend-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{}))
	return actorFrom(t, "the controller", configFor(tr.Status.Token))
}

func kubeletOf(t *testing.T, node string) actor {
	return impersonated(t, "the node's kubelet", "system:node:"+node, "system:nodes")
}

// namespaceAdmin is a person with the admin role in the release namespace:
// ConfigMaps (the pause switch), Secrets, workloads there; nothing
// cluster-scoped.
func namespaceAdmin(t *testing.T) actor {
	t.Helper()
	ensureBinding(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bypass-ns-admin", Namespace: Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespaceAdminRole(t)},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "ns-admin"}}})
	return impersonated(t, "a namespace admin", "ns-admin")
}

// operator holds the person's acts (the aggregated nodemend-repair-operator
// role's rules; envtest runs no controller-manager to aggregate them), and
// may write ConfigMaps in the release namespace (the pause switch).
func operator(t *testing.T) actor {
	t.Helper()
	ensureBinding(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bypass-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "nodemend-repair-operator-acts"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "operator"}}})
	ensureBinding(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bypass-operator", Namespace: Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespaceAdminRole(t)},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "operator"}}})
	return impersonated(t, "an operator", "operator")
}

// namespaceAdminRole is what the built-in admin role grants in a namespace
// of the objects that matter here (the built-in one is aggregated by the
// controller-manager, which envtest does not run).
func namespaceAdminRole(t *testing.T) string {
	t.Helper()
	const name = "bypass-namespace-admin"
	_, err := admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "pods", "serviceaccounts", "services", "events"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func ensureBinding(t *testing.T, b any) {
	t.Helper()
	var err error
	switch b := b.(type) {
	case *rbacv1.RoleBinding:
		_, err = admin.RbacV1().RoleBindings(b.Namespace).Create(t.Context(), b, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = admin.RbacV1().ClusterRoleBindings().Create(t.Context(), b, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// unboundToken is a token of the agent's ServiceAccount bound to no pod:
// the agent's RBAC, no node.
func unboundToken(t *testing.T) actor {
	t.Helper()
	tr := Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(t.Context(), "nodemend-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{}))
	return actorFrom(t, "an unbound token", configFor(tr.Status.Token))
}

// fixture is a healthy node that a person cordoned, its Karpenter NodeClaim
// and its Cluster API Machine (both naming it), and the name and boot a
// reboot order for it would have.
type fixture struct {
	node, order, boot              string
	nodeUID, claimUID, machineUID  types.UID
	claimName, machineName, prefix string
}

func newFixture(t *testing.T, prefix string, cordoned bool) *fixture {
	t.Helper()
	ctx := t.Context()
	f := &fixture{node: uniqueName(prefix), boot: "boot-1", prefix: prefix}
	f.order, f.claimName, f.machineName = f.node+"-reboot", f.node, f.node
	n := Must[*corev1.Node](t)(admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.node},
		Spec: corev1.NodeSpec{Unschedulable: cordoned}}, metav1.CreateOptions{}))
	f.nodeUID = n.UID
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), f.node, metav1.DeleteOptions{}) })
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: "KernelReady", Status: corev1.ConditionTrue, Reason: "KernelIsReady", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	n.Status.NodeInfo.BootID = f.boot
	Must[*corev1.Node](t)(admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}))

	adminDyn := Must[*dynamic.DynamicClient](t)(dynamic.NewForConfig(env.Config))
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capiNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	claim := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
		"metadata": map[string]any{"name": f.claimName},
		"spec": map[string]any{"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
			"requirements": []any{}}}}
	claim = Must[*unstructured.Unstructured](t)(adminDyn.Resource(nodeClaimGVR).Create(ctx, claim, metav1.CreateOptions{}))
	f.claimUID = claim.GetUID()
	_ = unstructured.SetNestedField(claim.Object, f.node, "status", "nodeName")
	Must[*unstructured.Unstructured](t)(adminDyn.Resource(nodeClaimGVR).UpdateStatus(ctx, claim, metav1.UpdateOptions{}))
	t.Cleanup(func() {
		_ = adminDyn.Resource(nodeClaimGVR).Delete(context.Background(), f.claimName, metav1.DeleteOptions{})
	})

	machine := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": f.machineName, "namespace": capiNamespace},
		"spec": map[string]any{"clusterName": "test", "bootstrap": map[string]any{"dataSecretName": "bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "infra"}}}}
	machine = Must[*unstructured.Unstructured](t)(adminDyn.Resource(machineGVR).Namespace(capiNamespace).Create(ctx, machine, metav1.CreateOptions{}))
	f.machineUID = machine.GetUID()
	_ = unstructured.SetNestedField(machine.Object, f.node, "status", "nodeRef", "name")
	Must[*unstructured.Unstructured](t)(adminDyn.Resource(machineGVR).Namespace(capiNamespace).UpdateStatus(ctx, machine, metav1.UpdateOptions{}))
	t.Cleanup(func() {
		_ = adminDyn.Resource(machineGVR).Namespace(capiNamespace).Delete(context.Background(), f.machineName, metav1.DeleteOptions{})
	})
	t.Cleanup(func() {
		_ = adminDyn.Resource(remediationGVR).Delete(context.Background(), f.order, metav1.DeleteOptions{})
	})
	// Known to the policy's params: untainted.
	settle(t, f, "is under repair (nodemend.dev/repair taint)")
	return f
}

// settle waits until the API server's informer of Nodes, which feeds
// nodemend-controller-targets its params, holds f's Node as it is now: until
// the controller's order for it, sent as a dry run, gets the answer want
// ("" : admitted). A Node the informer has not seen yet is no param at all,
// and an order for it would be admitted (docs/security.md#evidence).
func settle(t *testing.T, f *fixture, want string) {
	t.Helper()
	c := controllerActor(t)
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
		"metadata": map[string]any{"name": f.order},
		"spec": map[string]any{"nodeName": f.node, "action": "Reboot", "bootID": f.boot,
			"reason": "KernelReady=False/KernelDeadlock", "trigger": map[string]any{"type": "KernelReady", "status": "False"},
			"activeDeadlineSeconds": int64(300)}}}
	var last error
	waitFor(t, "the params to show "+f.node+" ("+want+")", func(ctx context.Context) bool {
		_, last = c.dyn.Resource(remediationGVR).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if want == "" {
			return last == nil
		}
		return last != nil && strings.Contains(last.Error(), want)
	})
}

// record is a repair record naming every target of f: the Node, the
// NodeClaim and the Machine by UID, the order by name; cordoned.
func (f *fixture) record() string {
	return fmt.Sprintf(`{"version":1,"phase":"Terminating","trigger":{"type":"KernelReady","status":"False"},`+
		`"rung":{"action":"Reboot","order":%q,"bootID":%q},"cordoned":true,`+
		`"target":{"kind":"Node","uid":%q},"targets":[{"uid":%q},{"uid":%q}]}`, f.order, f.boot, f.nodeUID, f.claimUID, f.machineUID)
}

// unclaimed is the record without the cordon claim (a repair that did not
// cordon the node).
func (f *fixture) unclaimed() string {
	return strings.Replace(f.record(), `"cordoned":true`, `"cordoned":false`, 1)
}

// attempt is a write, its outcome logged: preconditions may be refused.
func attempt(t *testing.T, a actor, what string, err error) error {
	t.Helper()
	verdict := "written"
	if err != nil {
		verdict = "refused: " + err.Error()
	}
	t.Logf("%s: %s: %s", a.name, what, verdict)
	return err
}

// prepare writes, as a, every precondition of the guarded operations on f:
// what a may write of it stays written.
func prepare(t *testing.T, a actor, f *fixture) {
	t.Helper()
	ctx := t.Context()
	patchNode := func(what string, pt types.PatchType, body string, sub ...string) {
		_, err := a.core.CoreV1().Nodes().Patch(ctx, f.node, pt, []byte(body), metav1.PatchOptions{}, sub...)
		_ = attempt(t, a, what, err)
	}
	annotations := string(mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"nodemend.dev/repair-state":  f.record(),
		"nodemend.dev/repair-phase":  "Terminating",
		"nodemend.dev/repair-target": fmt.Sprintf(`{"kind":"Node","uid":%q}`, f.nodeUID),
		"nodemend.dev/cordoned":      "true",
	}}}))
	patchNode("the repair record, the old keys naming every target, claiming the cordon", types.MergePatchType, annotations)
	patchNode("the same through the status", types.MergePatchType, annotations, "status")
	unclaimed := string(mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"nodemend.dev/repair-state": f.unclaimed(),
		"nodemend.dev/repair-phase": "Terminating",
		"nodemend.dev/cordoned":     nil,
	}}}))
	patchNode("the repair record naming every target", types.MergePatchType, unclaimed)
	// Appended to the taints the API server put there (TaintNodesByCondition).
	patchNode("the repair taint", types.JSONPatchType, `[{"op":"add","path":"/spec/taints/-","value":{"key":"nodemend.dev/repair","value":"KernelReady","effect":"NoSchedule"}}]`)
	// The evidence: only the node's own kubelet (and agent) may write it.
	patchNode("the Node's status: KernelReady False", types.StrategicMergePatchType,
		string(mustJSON(map[string]any{"status": map[string]any{"conditions": []map[string]any{condition("KernelReady", "False", "KernelDeadlock")}}})), "status")
}

// guarded are the operations, each as any identity would send it.
var guarded = []struct {
	name string
	do   func(t *testing.T, a actor, f *fixture) error
}{
	{"delete the Node", func(t *testing.T, a actor, f *fixture) error {
		return a.core.CoreV1().Nodes().Delete(t.Context(), f.node, metav1.DeleteOptions{})
	}},
	{"delete its NodeClaim", func(t *testing.T, a actor, f *fixture) error {
		return a.dyn.Resource(nodeClaimGVR).Delete(t.Context(), f.claimName, metav1.DeleteOptions{})
	}},
	{"delete its Machine", func(t *testing.T, a actor, f *fixture) error {
		return a.dyn.Resource(machineGVR).Namespace(capiNamespace).Delete(t.Context(), f.machineName, metav1.DeleteOptions{})
	}},
	{"order its reboot", func(t *testing.T, a actor, f *fixture) error {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
			"metadata": map[string]any{"name": f.order},
			"spec": map[string]any{"nodeName": f.node, "action": "Reboot", "bootID": f.boot,
				"reason": "KernelReady=False/KernelDeadlock", "trigger": map[string]any{"type": "KernelReady", "status": "False", "reason": "KernelDeadlock"},
				"activeDeadlineSeconds": int64(300)}}}
		_, err := a.dyn.Resource(remediationGVR).Create(t.Context(), o, metav1.CreateOptions{})
		return err
	}},
	{"lift a person's cordon", func(t *testing.T, a actor, f *fixture) error {
		_, err := a.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
		return err
	}},
	{"release it", annotate("nodemend.dev/release", "me")},
	{"veto its repair", annotate("nodemend.dev/do-not-repair", "me")},
	{"ask for its repair", annotate("nodemend.dev/repair-now", "me")},
	{"pause every repair", func(t *testing.T, a actor, _ *fixture) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nodemend-pause", Namespace: Namespace}, Data: map[string]string{"reason": "me"}}
		_, err := a.core.CoreV1().ConfigMaps(Namespace).Create(t.Context(), cm, metav1.CreateOptions{})
		if err == nil {
			_ = admin.CoreV1().ConfigMaps(Namespace).Delete(context.Background(), "nodemend-pause", metav1.DeleteOptions{})
		}
		return err
	}},
}

func annotate(key, value string) func(t *testing.T, a actor, f *fixture) error {
	return func(t *testing.T, a actor, f *fixture) error {
		body := mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
		_, err := a.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
}

// nativeToKubelet are what Kubernetes itself lets a kubelet do to its own
// Node (NodeRestriction): cordon or uncordon it — while it is not under
// repair (TestKubeletStaysOutOfItsRepair), which, in this class, no
// precondition it may write can change.
var nativeToKubelet = map[string]bool{"lift a person's cordon": true}

// recovered puts f under repair as the cluster would — its agent reports a
// fault, the controller taints it and records the repair (not claiming the
// person's cordon) — and then the fault clears.
func recovered(t *testing.T, f *fixture) {
	t.Helper()
	c := controllerActor(t)
	setKernelReady(t, f.node, corev1.ConditionFalse)
	_, err := c.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.JSONPatchType, []byte(`[`+
		`{"op":"add","path":"/spec/taints/-","value":{"key":"nodemend.dev/repair","value":"KernelReady","effect":"NoSchedule"}},`+
		`{"op":"add","path":"/metadata/annotations","value":{"nodemend.dev/repair-state":`+string(mustJSON(f.unclaimed()))+`}}]`),
		metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setKernelReady(t, f.node, corev1.ConditionTrue)
	settle(t, f, "shows a repair condition unhealthy; it shows none")
}

func TestTwoStepBypassIsRefused(t *testing.T) {
	waitForTargetsPolicy(t)
	other := agentOn(t, uniqueName("bypass-other"))
	agent := identityFromToken(t, other.node, other.token)
	identities := []func(f *fixture) actor{
		func(*fixture) actor { return controllerActor(t) },
		func(f *fixture) actor { return kubeletOf(t, f.node) },
		func(*fixture) actor { return actor{name: "another node's agent", core: agent.core, dyn: agent.dyn} },
		func(*fixture) actor { return namespaceAdmin(t) },
		func(*fixture) actor { return unboundToken(t) },
	}
	states := []struct {
		name  string
		setUp func(*testing.T, *fixture)
	}{
		{"healthy, cordoned by a person", func(*testing.T, *fixture) {}},
		{"recovered during its repair, cordoned by a person", recovered},
	}
	for _, state := range states {
		for _, op := range guarded {
			for _, who := range identities {
				f := newFixture(t, "bypass", true)
				state.setUp(t, f)
				a := who(f)
				t.Run(state.name+"/"+a.name+"/"+op.name, func(t *testing.T) {
					bypass(t, a, f, op.name, op.do, state.name == states[0].name)
				})
			}
		}
	}
}

// bypass prepares f as a, then tries op: refused, but for what Kubernetes
// lets a kubelet do to its own Node when it is not under repair.
func bypass(t *testing.T, a actor, f *fixture, name string, op func(*testing.T, actor, *fixture) error, notInRepair bool) {
	t.Helper()
	prepare(t, a, f)
	err := attempt(t, a, name, op(t, a, f))
	if a.name == "the node's kubelet" && nativeToKubelet[name] && notInRepair {
		if err != nil {
			t.Errorf("the kubelet may %s of its own Node when it is not under repair: %v", name, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s could %s after writing what it may", a.name, name)
	} else if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden", name, err)
	}
}

// The same operations pass where they should: the controller's, once the
// Node's status (written here as its agent would) shows the fault and the
// controller has recorded the repair (taint, record naming the target);
// a person's acts, for a holder of the nodemend-repair-operator permissions.
func TestTheLegitimatePathPasses(t *testing.T) {
	waitForTargetsPolicy(t)
	c := controllerActor(t)
	for _, op := range guarded[:4] {
		t.Run("the controller may "+op.name+" with real evidence", func(t *testing.T) {
			f := newFixture(t, "legit", false)
			setKernelReady(t, f.node, corev1.ConditionFalse)
			prepare(t, c, f)
			settle(t, f, "")
			if err := attempt(t, c, op.name, op.do(t, c, f)); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("the controller lifts its quarantine's cordon once the node is healthy", func(t *testing.T) {
		f := newFixture(t, "legit", false)
		setKernelReady(t, f.node, corev1.ConditionFalse)
		prepare(t, c, f)
		// The quarantine cordons and records it in one request.
		body := mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"nodemend.dev/repair-state": f.record()}},
			"spec": map[string]any{"unschedulable": true}})
		_, err := c.core.CoreV1().Nodes().Patch(t.Context(), f.node, types.MergePatchType, body, metav1.PatchOptions{})
		if err := attempt(t, c, "cordon (quarantine), recorded", err); err != nil {
			t.Fatal(err)
		}
		setKernelReady(t, f.node, corev1.ConditionTrue)
		if err := attempt(t, c, "lift its cordon", guarded[4].do(t, c, f)); err != nil {
			t.Error(err)
		}
	})
	op := operator(t)
	for _, act := range guarded[5:] {
		t.Run("an operator may "+act.name, func(t *testing.T) {
			f := newFixture(t, "legit", true)
			if err := attempt(t, op, act.name, act.do(t, op, f)); err != nil {
				t.Error(err)
			}
		})
	}
}

// A node under repair: its own kubelet may still report its status, but
// may not delete the Node, lift the quarantine's cordon, or remove or
// change the repair state — and an operator may remove it (abandon the
// repair).
func TestKubeletStaysOutOfItsRepair(t *testing.T) {
	waitForTargetsPolicy(t)
	ctx := t.Context()
	c := controllerActor(t)
	f := newFixture(t, "kubelet", false)
	setKernelReady(t, f.node, corev1.ConditionFalse)
	prepare(t, c, f)
	_, err := c.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := kubeletOf(t, f.node)
	refused, allowed := verdicts(t)
	_, err = k.core.CoreV1().Nodes().Patch(ctx, f.node, types.StrategicMergePatchType,
		mustJSON(map[string]any{"status": map[string]any{"conditions": []map[string]any{condition("KernelReady", "True", "KernelIsReady")}}}), metav1.PatchOptions{}, "status")
	allowed("its conditions", err)
	// The Node authorizer refuses a kubelet any Node deletion already; the
	// policy's rule stands behind it.
	refused("deleting its Node", k.core.CoreV1().Nodes().Delete(ctx, f.node, metav1.DeleteOptions{}), "cannot delete resource \"nodes\" | may not delete its Node while it is under repair")
	_, err = k.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
	refused("uncordoning", err, "may not cordon or uncordon its Node while it is under repair")
	_, err = k.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodemend.dev/repair-state":null}}}`), metav1.PatchOptions{})
	refused("removing the record", err, "only nodemend-controller writes the repair state")
	_, err = k.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodemend.dev/repair-state":"{}"}}}`), metav1.PatchOptions{}, "status")
	refused("changing the record through the status", err, "only nodemend-controller writes the repair state")

	op := operator(t)
	_, err = op.core.CoreV1().Nodes().Patch(ctx, f.node, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/taints"}]`), metav1.PatchOptions{})
	allowed("an operator abandons the repair: the taint", err)
	_, err = op.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodemend.dev/repair-state":null,"nodemend.dev/repair-phase":null,"nodemend.dev/repair-target":null,"nodemend.dev/cordoned":null}}}`), metav1.PatchOptions{})
	allowed("an operator abandons the repair: the record", err)
	_, err = op.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodemend.dev/repair-state":"{}"}}}`), metav1.PatchOptions{})
	refused("an operator writes a record", err, "set or change it")
}

// waitForTargetsPolicy waits until the API server enforces the chart's
// policies, the Node-params one last (its informer of Nodes syncs after the
// policy is seen).
func waitForTargetsPolicy(t *testing.T) {
	t.Helper()
	c := controllerActor(t)
	// A healthy Node, not under repair: an order for it is refused once the
	// policy reads Nodes as its params.
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitFor(t, "the controller's targets policy", func(ctx context.Context) bool {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
			"metadata": map[string]any{"name": "policy-probe"},
			"spec":     map[string]any{"nodeName": "policy-probe", "action": "Reboot", "bootID": "b", "activeDeadlineSeconds": int64(300)}}}
		_, err := c.dyn.Resource(remediationGVR).Create(ctx, o, metav1.CreateOptions{})
		if err == nil {
			_ = c.dyn.Resource(remediationGVR).Delete(ctx, "policy-probe", metav1.DeleteOptions{})
			return false
		}
		return strings.Contains(err.Error(), "only while its Node policy-probe is under repair")
	})
	k := kubeletOf(t, "policy-probe")
	waitFor(t, "the repair-state policy", func(ctx context.Context) bool {
		_, err := k.core.CoreV1().Nodes().Patch(ctx, "policy-probe", types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodemend.dev/repair-state":"x"}}}`), metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), "only nodemend-controller writes the repair state")
	})
}

// The rules on the controller's other objects each hold on their own: on a
// node under repair whose status shows the fault, the controller still may
// not delete a NodeClaim that names no Node or one its record does not
// name, nor order a reboot for another boot or for a trigger the Node does
// not show.
func TestControllerTargetsAreTheRecordsAndTheEvidences(t *testing.T) {
	waitForTargetsPolicy(t)
	ctx := t.Context()
	c := controllerActor(t)
	adminDyn := Must[*dynamic.DynamicClient](t)(dynamic.NewForConfig(env.Config))
	refused, _ := verdicts(t)
	under := func(record string) *fixture {
		f := newFixture(t, "target", false)
		setKernelReady(t, f.node, corev1.ConditionFalse)
		if record == "" {
			record = f.unclaimed()
		}
		body := mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"nodemend.dev/repair-state": record}}})
		Must[*corev1.Node](t)(c.core.CoreV1().Nodes().Patch(ctx, f.node, types.MergePatchType, body, metav1.PatchOptions{}))
		Must[*corev1.Node](t)(c.core.CoreV1().Nodes().Patch(ctx, f.node, types.JSONPatchType,
			[]byte(`[{"op":"add","path":"/spec/taints/-","value":{"key":"nodemend.dev/repair","value":"KernelReady","effect":"NoSchedule"}}]`), metav1.PatchOptions{}))
		if record == f.unclaimed() {
			settle(t, f, "")
		} else {
			settle(t, f, "that the repair record of Node "+f.node+" names")
		}
		return f
	}

	f := under("")
	claim := Must[*unstructured.Unstructured](t)(adminDyn.Resource(nodeClaimGVR).Get(ctx, f.claimName, metav1.GetOptions{}))
	unstructured.RemoveNestedField(claim.Object, "status", "nodeName")
	Must[*unstructured.Unstructured](t)(adminDyn.Resource(nodeClaimGVR).UpdateStatus(ctx, claim, metav1.UpdateOptions{}))
	refused("a NodeClaim that names no Node", c.dyn.Resource(nodeClaimGVR).Delete(ctx, f.claimName, metav1.DeleteOptions{}),
		"acts on a NodeClaim only through the Node it names")

	f = under(`{"version":1,"phase":"Terminating","target":{"kind":"NodeClaim","uid":"00000000-0000-4000-8000-000000000000"}}`)
	refused("a NodeClaim the record does not name", c.dyn.Resource(nodeClaimGVR).Delete(ctx, f.claimName, metav1.DeleteOptions{}),
		"that the repair record of Node "+f.node+" names")
	refused("a Machine the record does not name", c.dyn.Resource(machineGVR).Namespace(capiNamespace).Delete(ctx, f.machineName, metav1.DeleteOptions{}),
		"that the repair record of Node "+f.node+" names")
	refused("an order the record does not name", guarded[3].do(t, c, f), "that the repair record of Node "+f.node+" names")

	f = under("")
	f.boot = "boot-0"
	refused("an order for another boot", guarded[3].do(t, c, f), "orders only for the boot Node "+f.node+" reports")

	f = under("")
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
		"metadata": map[string]any{"name": f.order},
		"spec": map[string]any{"nodeName": f.node, "action": "Reboot", "bootID": f.boot,
			"reason": "KernelReady=False/KernelDeadlock", "trigger": map[string]any{"type": "AcceleratedHardwareReady", "status": "False"},
			"activeDeadlineSeconds": int64(300)}}}
	_, err := c.dyn.Resource(remediationGVR).Create(ctx, o, metav1.CreateOptions{})
	refused("an order for a trigger the Node does not show", err, "orders only for a trigger that the status of Node "+f.node+" shows (spec.trigger); "+
		f.order+" names AcceleratedHardwareReady=False")
	// An order made before the trigger was typed: its reason is read.
	unstructured.RemoveNestedField(o.Object, "spec", "trigger")
	_ = unstructured.SetNestedField(o.Object, "Ready=False/KubeletNotReady", "spec", "reason")
	_, err = c.dyn.Resource(remediationGVR).Create(ctx, o, metav1.CreateOptions{})
	refused("an untyped order for a trigger the Node does not show", err, f.order+" names Ready=False")
}

// Where RBAC is wider than the chart's (a site's extra binding, an older
// Kubernetes whose kubelets may delete Nodes), the policies still hold the
// lanes: the controller writes no Node status, creates no Node and, even
// holding a person's verbs, sets none of a person's acts; a kubelet deletes
// no Node under repair.
func TestLanesHoldWhereRBACIsWider(t *testing.T) {
	waitForTargetsPolicy(t)
	ctx := t.Context()
	const role = "bypass-wider"
	Must[*rbacv1.ClusterRole](t)(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"create", "patch", "delete"}},
			{APIGroups: []string{"nodemend.dev"}, Resources: []string{"nodes"}, Verbs: []string{"veto", "release", "repair"}},
		}}, metav1.CreateOptions{}))
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	f := newFixture(t, "wider", false)
	Must[*rbacv1.ClusterRoleBinding](t)(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "nodemend-controller", Namespace: Namespace},
			{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:node:" + f.node}},
	}, metav1.CreateOptions{}))
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})

	c := controllerActor(t)
	status := mustJSON(map[string]any{"status": map[string]any{"conditions": []map[string]any{condition("KernelReady", "False", "KernelDeadlock")}}})
	waitFor(t, "the wider RBAC", func(ctx context.Context) bool {
		_, err := c.core.CoreV1().Nodes().Patch(ctx, f.node, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status")
		return err != nil && strings.Contains(err.Error(), "may only update (patch) or delete Nodes")
	})
	refused, _ := verdicts(t)
	_, err := c.core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.node + "-new"}}, metav1.CreateOptions{})
	refused("the controller creates a Node", err, "may only update (patch) or delete Nodes")
	refused("the controller vetoes", annotate("nodemend.dev/do-not-repair", "x")(t, c, f), "may not set, change or remove nodemend.dev/do-not-repair")
	refused("the controller releases", annotate("nodemend.dev/release", "x")(t, c, f), "may only remove nodemend.dev/release")
	refused("the controller asks for a repair", annotate("nodemend.dev/repair-now", "x")(t, c, f), "may only remove nodemend.dev/release and nodemend.dev/repair-now")

	setKernelReady(t, f.node, corev1.ConditionFalse)
	prepare(t, controllerActor(t), f)
	k := kubeletOf(t, f.node)
	refused("the kubelet deletes its Node under repair", k.core.CoreV1().Nodes().Delete(ctx, f.node, metav1.DeleteOptions{}),
		"may not delete its Node while it is under repair")
}

// The policies find the record's target, order and cordon claim as
// substrings of its JSON (CEL cannot parse an annotation): they are what the
// record's own encoder writes.
func TestPoliciesReadTheRecordAsEncoded(t *testing.T) {
	rec := v1alpha1.RepairRecord{Version: 1, Phase: v1alpha1.RepairPhaseQuarantined, Cordoned: true,
		Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: corev1.ConditionFalse, Reason: `"cordoned":true`},
		Rung:    &v1alpha1.RungAttempt{Action: v1alpha1.LadderReboot, Of: 1, Order: "n1-reboot-0a1b2c3d4e"},
		Target:  &v1alpha1.RepairTarget{Backend: "karpenter", APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "nc", UID: "0f4c-uid"}}
	enc := rec.Encode()
	for _, want := range []string{`"uid":"0f4c-uid"`, `"order":"n1-reboot-0a1b2c3d4e"`, `"cordoned":true`} {
		if !strings.Contains(enc, want) {
			t.Errorf("the record %s does not hold %s", enc, want)
		}
	}
	// A value a node or a person controls cannot forge the claim: it is
	// escaped inside its string.
	if strings.Count(enc, `"cordoned":true`) != 1 {
		t.Errorf("the trigger's reason forged a cordon claim: %s", enc)
	}
	rec.Cordoned = false
	if enc := rec.Encode(); strings.Contains(enc, `"cordoned":true`) {
		t.Errorf("a record without the claim: %s", enc)
	}
	var text strings.Builder
	for _, name := range []string{"nodemend-controller-nodes", "nodemend-controller-targets"} {
		p := Find(installed, "ValidatingAdmissionPolicy", name)
		if p == nil {
			t.Fatalf("no policy %s rendered", name)
		}
		text.WriteString(string(mustJSON(p.Object)))
	}
	for _, want := range []string{`\"uid\":\"`, `\"order\":\"`, `\"cordoned\":true`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the policies no longer look for %s", want)
		}
	}
}
