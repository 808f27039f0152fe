package gate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

var twentyPct = intstr.FromString("20%")

// TestMaxAllowed is the arithmetic table of docs/repair.md: keep them in step.
func TestMaxAllowed(t *testing.T) {
	tests := []struct {
		limit intstr.IntOrString
		size  int
		want  int
	}{
		{twentyPct, 1, 1},  // 0.2 → 1
		{twentyPct, 3, 1},  // 0.6 → 1
		{twentyPct, 4, 1},  // 0.8 → 1
		{twentyPct, 5, 1},  // 1.0 → 1
		{twentyPct, 6, 2},  // 1.2 → 2
		{twentyPct, 10, 2}, // 2.0 → 2
		{twentyPct, 11, 3}, // 2.2 → 3
		{twentyPct, 100, 20},
		{intstr.FromString("0%"), 10, 0},
		{intstr.FromString("100%"), 10, 10},
		{intstr.FromInt32(3), 10, 3},
		{intstr.FromInt32(3), 2, 3},
		{intstr.FromInt32(0), 10, 0},
	}
	for _, tt := range tests {
		got, err := MaxAllowed(tt.limit, tt.size)
		if err != nil || got != tt.want {
			t.Errorf("MaxAllowed(%s, %d) = %d, %v; want %d", tt.limit.String(), tt.size, got, err, tt.want)
		}
	}
}

func TestDecide(t *testing.T) {
	pool := func(size, unhealthy int) Group { return Group{Name: "NodePool/gpu", Size: size, Unhealthy: unhealthy} }
	zone := func(size, unhealthy int) *Group { return &Group{Name: "zone-a", Size: size, Unhealthy: unhealthy} }
	tests := []struct {
		name    string
		in      Input
		allowed bool
		gate    Gate
		msg     string
	}{
		{"1 of 3 allowed", Input{MaxUnhealthy: twentyPct, Pool: pool(3, 1)}, true, None, ""},
		{"2 of 3 blocked", Input{MaxUnhealthy: twentyPct, Pool: pool(3, 2)}, false, Pool, "2 of 3 nodes unhealthy, more than the 1"},
		{"1 of 4 allowed", Input{MaxUnhealthy: twentyPct, Pool: pool(4, 1)}, true, None, ""},
		{"2 of 4 blocked", Input{MaxUnhealthy: twentyPct, Pool: pool(4, 2)}, false, Pool, ""},
		{"1 of 5 allowed", Input{MaxUnhealthy: twentyPct, Pool: pool(5, 1)}, true, None, ""},
		{"2 of 5 blocked", Input{MaxUnhealthy: twentyPct, Pool: pool(5, 2)}, false, Pool, ""},
		{"2 of 10 allowed", Input{MaxUnhealthy: twentyPct, Pool: pool(10, 2)}, true, None, ""},
		{"3 of 10 blocked", Input{MaxUnhealthy: twentyPct, Pool: pool(10, 3)}, false, Pool, "pool NodePool/gpu: 3 of 10 nodes unhealthy, more than the 2 that maxUnhealthy 20% allows"},
		{"a single node may be repaired", Input{MaxUnhealthy: twentyPct, Pool: pool(1, 1)}, true, None, ""},
		{"count limit", Input{MaxUnhealthy: intstr.FromInt32(3), Pool: pool(10, 3)}, true, None, ""},
		{"zero blocks everything", Input{MaxUnhealthy: intstr.FromInt32(0), Pool: pool(10, 1)}, false, Pool, ""},
		{"zone blocks", Input{MaxUnhealthy: twentyPct, Pool: pool(10, 1), Zone: zone(5, 2)}, false, Zone, "zone zone-a: 2 of 5"},
		{"zone allows", Input{MaxUnhealthy: twentyPct, Pool: pool(10, 1), Zone: zone(5, 1)}, true, None, ""},
		{"pool is checked before zone", Input{MaxUnhealthy: twentyPct, Pool: pool(3, 2), Zone: zone(5, 2)}, false, Pool, ""},
		{"pause", Input{Paused: true, PauseReason: "INC-42", MaxUnhealthy: twentyPct, Pool: pool(10, 1)}, false, Pause, "paused cluster-wide: INC-42"},
		{"veto", Input{Vetoed: true, Veto: "debugging GPU", Paused: true, MaxUnhealthy: twentyPct, Pool: pool(10, 1)}, false, Veto, "vetoed by the node's annotation: debugging GPU"},
		{"veto without reason", Input{Vetoed: true, Veto: "true", MaxUnhealthy: twentyPct, Pool: pool(10, 1)}, false, Veto, "vetoed by the node's annotation"},
		{"invalid limit fails closed", Input{MaxUnhealthy: intstr.FromString("many"), Pool: pool(10, 1)}, false, Pool, "invalid maxUnhealthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Allowed != tt.allowed || d.Gate != tt.gate {
				t.Fatalf("Decide = %+v, want allowed=%v gate=%q", d, tt.allowed, tt.gate)
			}
			if !strings.Contains(d.Message, tt.msg) {
				t.Errorf("message %q does not contain %q", d.Message, tt.msg)
			}
		})
	}
}

func TestGroupAdd(t *testing.T) {
	g := Group{Name: "a"}
	for _, u := range []bool{true, false, false, true, false} {
		g.Add(u)
	}
	if g != (Group{Name: "a", Size: 5, Unhealthy: 2}) {
		t.Errorf("group %+v", g)
	}
	if d := Decide(Input{MaxUnhealthy: twentyPct, Pool: g}); d.Allowed {
		t.Errorf("2 of 5 allowed: %+v", d)
	}
}
