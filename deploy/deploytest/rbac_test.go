package deploytest

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// access is one question to the authorizer.
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

// can asks the API server whether the client may do a (SelfSubjectAccessReview
// with the client's own credentials: the real authorizer, the real bindings).
func can(ctx context.Context, c kubernetes.Interface, a access) (bool, error) {
	r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

func checkAccess(t *testing.T, who string, c kubernetes.Interface, table []access) {
	t.Helper()
	for _, a := range table {
		got, err := can(t.Context(), c, a)
		if err != nil {
			t.Fatal(err)
		}
		if got != a.allowed {
			t.Errorf("%s %s %s %s/%s ns=%q name=%q: allowed=%v, want %v", who, a.verb, a.group, a.resource, a.subresource, a.namespace, a.name, got, a.allowed)
		}
	}
}

// The agent's token allows what the agent calls and nothing more.
func TestAgentRBAC(t *testing.T) {
	a := agentOn(t, "rbac-a")
	checkAccess(t, "agent", a.core, []access{
		{"get", "", "nodes", "", "", "rbac-a", true},
		{"patch", "", "nodes", "status", "", "rbac-a", true},
		{"list", "", "pods", "", "", "", true},
		{"watch", "", "pods", "", "", "", true},
		{"create", "", "events", "", "default", "", true},
		{"patch", "", "events", "", "default", "", true},
		{"list", "", "events", "", "default", "", true},
		{"get", "nodemend.dev", "nodediagnostics", "", "", "", true},
		{"watch", "nodemend.dev", "nodediagnostics", "", "", "", true},
		{"update", "nodemend.dev", "nodediagnostics", "status", "", "", true},

		{"delete", "", "nodes", "", "", "rbac-a", false},
		{"patch", "", "nodes", "", "", "rbac-a", false},
		{"update", "", "nodes", "", "", "rbac-a", false},
		{"list", "", "nodes", "", "", "", false},
		{"update", "", "nodes", "status", "", "rbac-a", false},
		{"get", "", "pods", "", "kube-system", "x", false},
		{"delete", "", "pods", "", "kube-system", "", false},
		{"create", "", "pods", "eviction", "kube-system", "", false},
		{"list", "", "secrets", "", "", "", false},
		{"get", "", "secrets", "", Namespace, "x", false},
		{"get", "", "configmaps", "", Namespace, "x", false},
		{"create", "", "events", "", "kube-system", "", false},
		{"list", "", "events", "", "", "", false},
		{"update", "nodemend.dev", "nodediagnostics", "", "", "", false},
		{"delete", "nodemend.dev", "nodediagnostics", "", "", "", false},
		{"create", "nodemend.dev", "nodediagnostics", "", "", "", false},
		{"list", "nodemend.dev", "noderepairpolicies", "", "", "", false},
		{"create", "authentication.k8s.io", "serviceaccounts", "token", Namespace, "", false},
		{"impersonate", "", "users", "", "", "", false},
	})
}

// The controller's ServiceAccount allows what repair needs and no more.
func TestControllerRBAC(t *testing.T) {
	c := controllerClient(t)
	checkAccess(t, "controller", c, []access{
		{"list", "", "nodes", "", "", "", true},
		{"watch", "", "nodes", "", "", "", true},
		{"patch", "", "nodes", "", "", "n1", true},
		{"delete", "", "nodes", "", "", "n1", true},
		{"list", "", "pods", "", "", "", true},
		{"delete", "", "pods", "", "team-a", "p", true},
		{"create", "", "pods", "eviction", "team-a", "p", true},
		{"get", "apps", "daemonsets", "", "kube-system", "ds", true},
		{"watch", "nodemend.dev", "noderepairpolicies", "", "", "", true},
		{"create", "events.k8s.io", "events", "", "default", "", true},
		{"delete", "karpenter.sh", "nodeclaims", "", "", "nc", true},
		{"get", "karpenter.sh", "nodepools", "", "", "np", true},
		{"delete", "cluster.x-k8s.io", "machines", "", "capi", "m", true},
		{"get", "cluster.x-k8s.io", "machinedeployments", "", "capi", "md", true},
		{"get", "", "configmaps", "", Namespace, "nodemend-pause", true},
		{"watch", "", "configmaps", "", Namespace, "nodemend-pause", true},
		{"get", "", "configmaps", "", Namespace, "nodemend-agent-config", true},
		{"list", "", "configmaps", "", Namespace, "nodemend-agent-config", true},
		{"watch", "", "configmaps", "", Namespace, "nodemend-agent-config", true},
		{"create", "coordination.k8s.io", "leases", "", Namespace, "", true},
		{"update", "coordination.k8s.io", "leases", "", Namespace, "nodemend-controller", true},
		{"create", "", "events", "", Namespace, "", true},
		{"list", "", "events", "", "default", "", true},
		{"watch", "", "events", "", "default", "", true},

		{"update", "", "nodes", "status", "", "n1", false},
		{"list", "", "events", "", "kube-system", "", false},
		{"create", "", "events", "", "default", "", false},
		{"patch", "", "nodes", "status", "", "n1", false},
		{"create", "", "nodes", "", "", "", false},
		{"get", "", "pods", "", "team-a", "p", false},
		{"create", "", "pods", "", "team-a", "", false},
		{"list", "", "secrets", "", "", "", false},
		{"get", "", "configmaps", "", Namespace, "other", false},
		{"list", "", "configmaps", "", Namespace, "", false},
		{"update", "", "configmaps", "", Namespace, "nodemend-agent-config", false},
		{"update", "coordination.k8s.io", "leases", "", Namespace, "someone-elses-lease", false},
		{"create", "", "events", "", "kube-system", "", false},
		{"update", "nodemend.dev", "noderepairpolicies", "", "", "p", false},
		{"get", "nodemend.dev", "nodediagnostics", "", "", "", false},
		{"create", "nodemend.dev", "noderemediations", "", "", "", true},
		{"update", "nodemend.dev", "noderemediations", "status", "", "r", false},
		{"patch", "nodemend.dev", "noderemediations", "status", "", "r", false},
		{"create", "karpenter.sh", "nodeclaims", "", "", "", false},
		{"update", "cluster.x-k8s.io", "machines", "", "capi", "m", false},
		{"delete", "apps", "daemonsets", "", "kube-system", "ds", false},
	})
}

// No role the chart renders grants "*" in any field.
func TestNoRuleUsesAWildcard(t *testing.T) {
	for _, o := range installed {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for i, r := range rules {
			for _, field := range []string{"apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"} {
				vals, _, _ := unstructured.NestedStringSlice(r.(map[string]any), field)
				for _, v := range vals {
					if v == "*" || (field == "resources" && len(v) > 1 && v[len(v)-2:] == "/*") {
						t.Errorf("%s rule %d: %s contains %q", Key(o), i, field, v)
					}
				}
			}
		}
	}
}
