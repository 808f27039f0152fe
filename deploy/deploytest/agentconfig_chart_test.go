package deploytest

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodemend.dev/nodemend/deploy/deploytest/helmrender"
)

// The controller judges policies against the agents' config the chart
// deploys: its --agent-config names the ConfigMap the agents' DaemonSet
// mounts, which holds the file under the key the controller reads, and its
// Role may get, list and watch that ConfigMap by name. Without the chart's
// agents the flag is empty (the controller says it does not know) and the
// Role names no agent ConfigMap.
func TestControllerReadsTheAgentsConfigMap(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "nodemend-agent-config"},
		{[]string{"agent.enabled=false"}, ""},
	} {
		out, err := chart.Template(helmrender.Values{Set: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		objs := Must[[]*unstructured.Unstructured](t)(Objects(out))
		if got := flagValue(t, objs, "--agent-config="); got != tc.want {
			t.Errorf("--set %v: --agent-config=%q, want %q", tc.set, got, tc.want)
		}
		rule := roleRuleNaming(objs, "nodemend-agent-config")
		if tc.want == "" {
			if rule != nil {
				t.Errorf("--set %v: the controller's Role still names the agents' ConfigMap: %v", tc.set, rule)
			}
			continue
		}
		verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
		if !slices.Equal(verbs, []string{"get", "list", "watch"}) {
			t.Errorf("the controller's Role on the agents' ConfigMap: verbs %v, want get, list, watch", verbs)
		}
		cm := Find(objs, "ConfigMap", tc.want)
		if _, ok, _ := unstructured.NestedString(cm.Object, "data", "agent.yaml"); !ok {
			t.Errorf("ConfigMap %s has no agent.yaml", tc.want)
		}
		ds := Find(objs, "DaemonSet", "nodemend-agent")
		vols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
		if !slices.ContainsFunc(vols, func(v any) bool {
			name, _, _ := unstructured.NestedString(v.(map[string]any), "configMap", "name")
			return name == tc.want
		}) {
			t.Errorf("the agents' DaemonSet does not mount ConfigMap %s", tc.want)
		}
	}
}

// flagValue is the value of the controller Deployment's arg with prefix.
func flagValue(t *testing.T, objs []*unstructured.Unstructured, prefix string) string {
	t.Helper()
	d := Find(objs, "Deployment", "nodemend-controller")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v
		}
	}
	t.Fatalf("the controller has no %s arg: %v", prefix, args)
	return ""
}

// roleRuleNaming is the rule of the controller's Role whose resourceNames
// include name, or nil.
func roleRuleNaming(objs []*unstructured.Unstructured, name string) map[string]any {
	role := Find(objs, "Role", "nodemend-controller")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	for _, r := range rules {
		names, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
		if slices.Contains(names, name) {
			return r.(map[string]any)
		}
	}
	return nil
}
