package deploytest

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Every object the chart renders with every feature on is accepted by a
// real API server through server-side apply: schema, CRD validation (the
// NodeRepairPolicy, the prometheus-operator objects), CEL compilation of the
// admission policies, RBAC escalation checks on the roles.
func TestEveryRenderedObjectIsAccepted(t *testing.T) {
	if len(installed) < 20 {
		t.Fatalf("only %d objects rendered", len(installed))
	}
	for _, o := range installed {
		err, ok := applyErrs[Key(o)]
		switch {
		case !ok:
			t.Errorf("%s: %v", Key(o), errNotApplied)
		case err != nil:
			t.Errorf("%s: refused: %v", Key(o), err)
		}
	}
}

// The all-features values really turn every optional part on, so the test
// above covers them.
func TestAllFeaturesRenderEveryOptionalObject(t *testing.T) {
	for _, want := range []struct{ kind, name string }{
		{"Namespace", Namespace},
		{"PodMonitor", "nodemend-agent"},
		{"ServiceMonitor", "nodemend-controller"},
		{"PrometheusRule", "nodemend"},
		{"ConfigMap", "nodemend-dashboard"},
		{"NodeRepairPolicy", "gpu"},
		{"ClusterRole", "nodemend-systemd-agent"},
		{"ValidatingAdmissionPolicy", "nodemend-agent-node-status"},
		{"ValidatingAdmissionPolicy", "nodemend-agent-nodediagnostic-status"},
		{"ValidatingAdmissionPolicy", "nodemend-repair-policy-fires"},
		{"PodDisruptionBudget", "nodemend-controller"},
		{"CustomResourceDefinition", "nodediagnostics.nodemend.dev"},
		{"CustomResourceDefinition", "noderepairpolicies.nodemend.dev"},
	} {
		if Find(installed, want.kind, want.name) == nil {
			t.Errorf("no %s %s rendered", want.kind, want.name)
		}
	}
}

// The workloads' pod templates pass Pod Security admission where they are
// meant to run: the controller under "restricted", the agent only where
// "privileged" is allowed (the release namespace the chart labels so).
func TestPodTemplatesPassPodSecurity(t *testing.T) {
	ctx := t.Context()
	restricted := "pss-restricted"
	Must[*corev1.Namespace](t)(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restricted,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}))

	controller := podFromTemplate(t, "Deployment", "nodemend-controller")
	controller.Namespace = restricted
	if _, err := admin.CoreV1().Pods(restricted).Create(ctx, controller, metav1.CreateOptions{}); err != nil {
		t.Errorf("controller pod under restricted Pod Security: %v", err)
	}

	agent := podFromTemplate(t, "DaemonSet", "nodemend-agent")
	agent.Namespace = Namespace
	if _, err := admin.CoreV1().Pods(Namespace).Create(ctx, agent, metav1.CreateOptions{}); err != nil {
		t.Errorf("agent pod in the release namespace: %v", err)
	}
	agent.Namespace = restricted
	if _, err := admin.CoreV1().Pods(restricted).Create(ctx, agent, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("agent pod under restricted Pod Security: %v, want a PodSecurity refusal", err)
	}
}

// podFromTemplate builds a Pod from a rendered workload's pod template.
func podFromTemplate(t *testing.T, kind, name string) *corev1.Pod {
	t.Helper()
	o := Find(installed, kind, name)
	if o == nil {
		t.Fatalf("no %s %s", kind, name)
	}
	tmpl, found, err := unstructured.NestedMap(o.Object, "spec", "template")
	if err != nil || !found {
		t.Fatalf("%s %s: no pod template (%v)", kind, name, err)
	}
	pt := &corev1.PodTemplateSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pt); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: pt.ObjectMeta, Spec: pt.Spec}
	pod.Name = strings.ToLower(kind) + "-" + name
	return pod
}

// Each accepted object can be read back as rendered (spot check: the
// policy's spec survives the CRD's pruning unchanged).
func TestRepairPolicyIsStoredAsRendered(t *testing.T) {
	want := Find(installed, "NodeRepairPolicy", "gpu")
	if want == nil {
		t.Fatal("no NodeRepairPolicy gpu rendered")
	}
	got := Must[*unstructured.Unstructured](t)(dyn.Resource(nrpResource).Get(t.Context(), "gpu", metav1.GetOptions{}))
	w, _ := json.Marshal(want.Object["spec"])
	g, _ := json.Marshal(got.Object["spec"])
	if string(w) != string(g) {
		t.Errorf("stored spec\n%s\nwant\n%s", g, w)
	}
}

// An upgrade applies the chart again, server-side and without force (helm
// 4): a field the chart sets that a cluster controller owns conflicts and
// the upgrade fails. The aggregation controller owns an aggregated
// ClusterRole's rules (it wrote them after the install): the chart must not
// set them, not even to [].
func TestUpgradeDoesNotClaimAggregatedRules(t *testing.T) {
	ctx := t.Context()
	roles := 0
	for _, o := range installed {
		if o.GetKind() != "ClusterRole" || o.Object["aggregationRule"] == nil {
			continue
		}
		roles++
		ri := dyn.Resource(rbacv1.SchemeGroupVersion.WithResource("clusterroles"))
		filled, err := json.Marshal(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": o.GetName()},
			"rules": []any{map[string]any{"apiGroups": []any{"nodemend.dev"}, "resources": []any{"nodes"}, "verbs": []any{"veto"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, filled, metav1.PatchOptions{FieldManager: "clusterrole-aggregation-controller", Force: &force}); err != nil {
			t.Fatalf("the aggregation controller's write of %s: %v", o.GetName(), err)
		}
		again, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, again, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			t.Errorf("the chart's %s applied again (an upgrade): %v", o.GetName(), err)
		}
	}
	if roles == 0 {
		t.Fatal("the chart renders no aggregated ClusterRole (nodemend-repair-operator)")
	}
}
