package cli

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// objCondition is a status condition of an unstructured object (NodeClaim,
// NodePool, Machine all use the metav1.Condition shape).
type objCondition struct {
	Type, Status, Reason, Message string
	Time                          time.Time
}

func conditionsOf(u *unstructured.Unstructured) []objCondition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make([]objCondition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := objCondition{}
		c.Type, _ = m["type"].(string)
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		if s, ok := m["lastTransitionTime"].(string); ok {
			c.Time, _ = time.Parse(time.RFC3339, s)
		}
		out = append(out, c)
	}
	return out
}
