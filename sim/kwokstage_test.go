package sim

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestKwokStagesExcludeStoppedNodes(t *testing.T) {
	node := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-initialize}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.phase', operator: In, values: [Running]}
  next: {statusTemplate: "conditions: []"}
`
	pod := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
  next: {}
`
	out, err := kwokStages([]string{node, pod})
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("want the two stages and the stopped one, got %d documents:\n%s", len(docs), out)
	}
	terms := func(doc string) (names []string, keys []string) {
		var st struct {
			Metadata struct{ Name string }
			Spec     struct {
				Selector struct {
					MatchExpressions []struct{ Key, Operator string }
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &st); err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Spec.Selector.MatchExpressions {
			keys = append(keys, e.Key+" "+e.Operator)
		}
		return []string{st.Metadata.Name}, keys
	}
	stopped := `.metadata.annotations["` + HeartbeatStoppedAnnotation + `"]`
	if _, keys := terms(docs[0]); len(keys) != 2 || keys[1] != stopped+" DoesNotExist" {
		t.Errorf("node stage terms = %q, want the original and the exclusion", keys)
	}
	if !strings.Contains(docs[0], "statusTemplate") {
		t.Errorf("node stage lost its next step:\n%s", docs[0])
	}
	if _, keys := terms(docs[1]); len(keys) != 1 {
		t.Errorf("pod stage changed: %q", keys)
	}
	if name, keys := terms(docs[2]); name[0] != "node-heartbeat-stopped" || len(keys) != 1 || keys[0] != stopped+" Exists" {
		t.Errorf("stopped stage = %s %q", name, keys)
	}
}
