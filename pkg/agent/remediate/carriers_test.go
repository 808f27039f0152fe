package remediate

import (
	"testing"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/rungs"
)

// Every rung the rung table gives the agent has a carrier here, and the
// agent carries out nothing else: a rung added to the table without its
// carrier would be refused on every node as "not supported by this agent".
func TestEveryAgentRungHasACarrier(t *testing.T) {
	e := &Executor{}
	carriers := e.carriers()
	want := map[v1alpha1.HostAction]bool{}
	for _, r := range rungs.Table() {
		if r.By != rungs.Agent {
			continue
		}
		want[r.Order] = true
		c, ok := carriers[r.Order]
		if !ok || c.do == nil || c.mechanism == nil {
			t.Errorf("%s (order %s): no carrier, or one without its act or mechanism", r.Action, r.Order)
		}
		if c.on || c.mechanism != nil && c.mechanism() != "" && c.mechanism() != MechanismNone {
			t.Errorf("%s: on (%v) or a mechanism (%q) with nothing configured", r.Action, c.on, c.mechanism())
		}
	}
	for a := range carriers {
		if !want[a] {
			t.Errorf("carrier for %s, which no agent rung of pkg/rungs orders", a)
		}
	}
}
