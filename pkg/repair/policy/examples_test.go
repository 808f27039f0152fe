package policy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// Every NodeRepairPolicy the project ships as an example (the docs' manifests
// and Helm values, the chart's default values) must be admitted by the CRD and
// compile without a warning: a reason or family name nodemend does not know
// (a typo, a renamed reason) would make its rule silently match nothing.
func TestShippedExamplePoliciesCompile(t *testing.T) {
	var examples []v1alpha1.NodeRepairPolicy
	var sources []string
	add := func(where string, o v1alpha1.NodeRepairPolicy) {
		examples = append(examples, o)
		sources = append(sources, where)
	}
	pages, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	for _, p := range append(pages, filepath.Join(testenv.RepoRoot(), "deploy", "helm", "nodemend", "values.yaml")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blocks := []string{string(b)}
		if filepath.Ext(p) == ".md" {
			blocks = nil
			for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
				blocks = append(blocks, m[1])
			}
		}
		for _, block := range blocks {
			var head struct {
				Kind           string `json:"kind"`
				RepairPolicies []struct {
					Name string                        `json:"name"`
					Spec v1alpha1.NodeRepairPolicySpec `json:"spec"`
				} `json:"repairPolicies"`
			}
			if yaml.Unmarshal([]byte(block), &head) != nil {
				continue
			}
			if head.Kind == "NodeRepairPolicy" {
				var o v1alpha1.NodeRepairPolicy
				if err := yaml.UnmarshalStrict([]byte(block), &o); err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				add(p, o)
			}
			for _, rp := range head.RepairPolicies {
				o := v1alpha1.NodeRepairPolicy{Spec: rp.Spec}
				o.Name = rp.Name
				add(p+" (repairPolicies)", o)
			}
		}
	}
	if len(examples) < 3 {
		t.Fatalf("found only %d example policies", len(examples))
	}
	for i, o := range examples {
		if _, warnings, err := FromAPI(&o); err != nil || len(warnings) > 0 {
			t.Errorf("%s: policy %s: error %v, warnings %q", sources[i], o.Name, err, warnings)
		}
		o.ResourceVersion = ""
		if err := k8s.Create(context.Background(), &o, client.DryRunAll); err != nil {
			t.Errorf("%s: policy %s refused by the API server: %v", sources[i], o.Name, err)
		}
	}
}
