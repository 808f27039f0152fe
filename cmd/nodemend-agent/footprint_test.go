package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent links only the API kinds it uses (docs/agent.md#footprint): no
// typed clientset or its scheme (every API group), no dynamic client (its
// apply machinery and unstructured round trips), no apply configurations, no OpenAPI models (strategic merge patches), and of
// k8s.io/api only core/v1.
func TestAgentLinksOnlyTheKindsItUses(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list listed only %d dependencies", len(deps))
	}
	forbidden := []string{
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/applyconfigurations/",
		"k8s.io/client-go/informers",
		"k8s.io/client-go/dynamic",
		"k8s.io/client-go/util/apply",
		"k8s.io/client-go/tools/record",
		"k8s.io/apimachinery/pkg/util/strategicpatch",
		"k8s.io/kube-openapi/pkg/util/proto",
		"k8s.io/kube-openapi/pkg/validation",
		"github.com/google/gnostic-models/",
		"sigs.k8s.io/controller-runtime",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == strings.TrimSuffix(f, "/") || strings.HasPrefix(d, f) || strings.HasPrefix(d, f+"/") {
				t.Errorf("nodemend-agent links %s", d)
			}
		}
		if strings.HasPrefix(d, "k8s.io/api/") && d != "k8s.io/api/core/v1" {
			t.Errorf("nodemend-agent links the API group %s; it uses core/v1 only", d)
		}
	}
}
