package sim

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// HeartbeatStoppedAnnotation on a kwok node stops kwok acting as its
// kubelet, as if the kubelet had died: the node's status stays what it was
// last written (a storm writes Ready=False and it stays False). Set it
// before writing the status it should keep.
const HeartbeatStoppedAnnotation = "sim.nodemend.dev/heartbeat-stopped"

// heartbeatStoppedStage matches the annotated nodes and does nothing. It is
// needed besides the other stages' exclusion: kwok keeps a node's pending
// stage job (the heartbeat, due up to 20 minutes later, replaying the
// status it was scheduled with) until another stage matches the node; a
// node that matches no stage keeps its stale job.
const heartbeatStoppedStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat-stopped
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["` + HeartbeatStoppedAnnotation + `"]'
      operator: Exists
  next: {}
`

// kwokStages returns kwok's configuration from its stage documents: every
// Node stage gains a term that excludes nodes with the heartbeat stopped,
// and the no-op stage for those nodes is added.
func kwokStages(docs []string) (string, error) {
	out := make([]string, 0, len(docs)+1)
	for _, doc := range docs {
		var stage map[string]any
		if err := yaml.Unmarshal([]byte(doc), &stage); err != nil {
			return "", fmt.Errorf("kwok stage: %w", err)
		}
		spec, _ := stage["spec"].(map[string]any)
		ref, _ := spec["resourceRef"].(map[string]any)
		if spec == nil || ref["kind"] != "Node" {
			out = append(out, strings.TrimSpace(doc))
			continue
		}
		selector, _ := spec["selector"].(map[string]any)
		if selector == nil {
			selector = map[string]any{}
			spec["selector"] = selector
		}
		terms, _ := selector["matchExpressions"].([]any)
		selector["matchExpressions"] = append(terms, map[string]any{
			"key":      `.metadata.annotations["` + HeartbeatStoppedAnnotation + `"]`,
			"operator": "DoesNotExist",
		})
		b, err := yaml.Marshal(stage)
		if err != nil {
			return "", err
		}
		out = append(out, strings.TrimSpace(string(b)))
	}
	out = append(out, strings.TrimSpace(heartbeatStoppedStage))
	return strings.Join(out, "\n---\n") + "\n", nil
}
