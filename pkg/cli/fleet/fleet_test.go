package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type nodeOpt func(*corev1.Node)

func mkNode(name, np string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	if np != "" {
		n.Labels[karpenter.NodePoolLabel] = np
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func failing(t string, reason string, ago time.Duration) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(t), Status: corev1.ConditionFalse,
			Reason: reason, Message: "m", LastTransitionTime: metav1.NewTime(now.Add(-ago))})
	}
}

func annotate(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i+1 < len(kv); i += 2 {
			n.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// withRecord puts a repair record, as its JSON, on the node.
func withRecord(json string) nodeOpt { return annotate(record.StateAnnotation, json) }

func zone(z string) nodeOpt { return func(n *corev1.Node) { n.Labels[pool.ZoneLabel] = z } }

func healthyPool(np string, count int) []*corev1.Node {
	var out []*corev1.Node
	for i := range count {
		out = append(out, mkNode(np+"-ok-"+string(rune('a'+i)), np))
	}
	return out
}

func find(r Report, name string) Node {
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	return Node{}
}

func TestAssess(t *testing.T) {
	noneSet, _ := policy.NewSet([]v1alpha1.NodeRepairPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "watch-only"},
		Spec: v1alpha1.NodeRepairPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"watch": "only"}}, Action: v1alpha1.ActionNone}}})
	cases := []struct {
		name      string
		nodes     []*corev1.Node
		set       *policy.Set
		paused    bool
		node      string
		state     State
		gate      gate.Gate
		detail    string
		reason    string
		poolBlock bool
	}{
		{name: "healthy", nodes: []*corev1.Node{mkNode("n", "gpu")}, node: "n", state: Healthy},
		{name: "tolerating with time left", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("AcceleratedHardwareReady", "NvidiaXID79Error", 4*time.Minute))),
			node: "n", state: Tolerating, detail: "6m left of 10m (AcceleratedHardwareReady=False/NvidiaXID79Error)", reason: "NvidiaXID79Error"},
		{name: "recorded since wins over a later transition", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Minute),
			withRecord(`{"version":1,"unhealthySince":{"KernelReady":"2026-03-01T11:35:00Z"}}`))),
			node: "n", state: Tolerating, detail: "5m left of 30m"},
		{name: "due", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour))), node: "n", state: Due},
		{name: "blocked by the pool gate", nodes: append(healthyPool("gpu", 3), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour)),
			mkNode("m", "gpu", failing("KernelReady", "KernelBug", time.Minute))),
			node: "n", state: Blocked, gate: gate.Pool, detail: "pool NodePool/gpu: 2 of 5 nodes unhealthy, more than the 1 that maxUnhealthy 20% allows", poolBlock: true},
		{name: "blocked by the zone gate", nodes: []*corev1.Node{
			mkNode("n", "a", zone("z1"), failing("KernelReady", "KernelBug", time.Hour)), mkNode("m", "b", zone("z1"), failing("KernelReady", "KernelBug", time.Hour)),
			mkNode("a1", "a"), mkNode("a2", "a"), mkNode("a3", "a"), mkNode("a4", "a"), mkNode("a5", "a"), mkNode("b1", "b"), mkNode("b2", "b"), mkNode("b3", "b"), mkNode("b4", "b"), mkNode("b5", "b")},
			node: "n", state: Blocked, gate: gate.Zone, detail: "zone z1: 2 of 2 nodes unhealthy"},
		{name: "vetoed", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour), annotate(record.VetoAnnotation, "investigating"))),
			node: "n", state: Blocked, gate: gate.Veto, detail: "repair vetoed by the node's annotation: investigating"},
		{name: "paused", paused: true, nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour))),
			node: "n", state: Blocked, gate: gate.Pause, detail: "repairs are paused cluster-wide: upgrade"},
		{name: "not-ready kubelet is tolerated too", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}
		})), node: "n", state: Tolerating, reason: "NodeStatusUnknown"},
		{name: "pressure is never a trigger", nodes: []*corev1.Node{mkNode("n", "gpu", failing("MemoryPressure", "KubeletHasInsufficientMemory", time.Hour))}, node: "n", state: Healthy},
		{name: "action None", set: noneSet, nodes: []*corev1.Node{mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour), func(n *corev1.Node) { n.Labels["watch"] = "only" })},
			node: "n", state: NotRepaired},
		{name: "draining", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour), withRecord(
			`{"version":1,"phase":"Draining","started":"2026-03-01T11:57:00Z","trigger":{"type":"KernelReady","status":"False","reason":"KernelBug"}}`))),
			node: "n", state: Draining, detail: "for 3m, deadline in 7m"},
		{name: "draining halted by a veto", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", withRecord(
			`{"version":1,"phase":"Draining","started":"2026-03-01T11:57:00Z","trigger":{"type":"KernelReady","status":"False","reason":"KernelBug"}}`), annotate(record.VetoAnnotation, "true"))),
			node: "n", state: Draining, gate: gate.Veto, detail: "halted: repair vetoed"},
		{name: "terminating", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", withRecord(
			`{"version":1,"phase":"Terminating","started":"2026-03-01T11:50:00Z","drained":"2026-03-01T11:58:00Z","trigger":{"type":"KernelReady","status":"False","reason":"KernelBug"},"target":{"backend":"karpenter","apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"gpu-abc"}}`))),
			node: "n", state: Terminating, detail: "handed over 2m ago: NodeClaim gpu-abc"},
		{name: "failed", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", withRecord(
			`{"version":1,"phase":"Terminating","started":"2026-03-01T10:50:00Z","drained":"2026-03-01T11:00:00Z","failed":"2026-03-01T11:30:00Z","trigger":{"type":"KernelReady","status":"False","reason":"KernelBug"},"target":{"backend":"karpenter","apiVersion":"karpenter.sh/v1","kind":"NodeClaim","name":"gpu-abc"}}`))),
			node: "n", state: Failed},
		{name: "invalid record", nodes: []*corev1.Node{mkNode("n", "gpu", withRecord(`{"version":1,"phase":"Exploding"}`))}, node: "n", state: Invalid},
		{name: "a previous release's repair", nodes: append(healthyPool("gpu", 9), mkNode("n", "gpu", failing("KernelReady", "KernelBug", time.Hour), annotate(
			"nodemend.dev/repair-phase", "Draining", "nodemend.dev/repair-started", "2026-03-01T11:57:00Z", "nodemend.dev/repair-reason", "KernelReady=False/KernelBug"))),
			node: "n", state: Draining, detail: "for 3m, deadline in 7m"},
		{name: "deleting", nodes: []*corev1.Node{mkNode("n", "gpu", func(n *corev1.Node) { ts := metav1.NewTime(now.Add(-time.Minute)); n.DeletionTimestamp = &ts })}, node: "n", state: Deleting},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := tc.set
			if set == nil {
				set, _ = policy.NewSet(nil)
			}
			r := Assess(Input{Nodes: tc.nodes, Policies: set, Pools: backends.Pools(""), Paused: tc.paused, PauseReason: "upgrade", Now: now})
			got := find(r, tc.node)
			if got.State != tc.state || got.Gate != tc.gate || !strings.Contains(got.Detail, tc.detail) || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("got state %q gate %q detail %q reason %q; want %q %q %q %q", got.State, got.Gate, got.Detail, got.Reason, tc.state, tc.gate, tc.detail, tc.reason)
			}
			if tc.poolBlock {
				if len(r.Pools) != 1 || !r.Pools[0].Blocked || r.Pools[0].Allowed != 1 || r.Pools[0].Unhealthy != 2 {
					t.Errorf("pools %+v", r.Pools)
				}
			}
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAssessAgreesWithGate: the pool line uses gate.MaxAllowed's rounding
// (percentages rounded up) and a count limit as given.
func TestAssessPoolAllowance(t *testing.T) {
	max3 := intstr.FromInt32(3)
	set, _ := policy.NewSet([]v1alpha1.NodeRepairPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "three"}, Spec: v1alpha1.NodeRepairPolicySpec{MaxUnhealthy: &max3}}})
	r := Assess(Input{Nodes: healthyPool("p", 10), Policies: set, Pools: backends.Pools(""), Now: now})
	if r.Pools[0].Allowed != 3 || r.Pools[0].MaxUnhealthy != "3" {
		t.Fatalf("%+v", r.Pools[0])
	}
	def, _ := policy.NewSet(nil)
	r = Assess(Input{Nodes: healthyPool("p", 11), Policies: def, Pools: backends.Pools(""), Now: now})
	if r.Pools[0].Allowed != 3 { // 20% of 11 = 2.2, rounded up
		t.Fatalf("%+v", r.Pools[0])
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 45 * time.Second: "45s", 90 * time.Second: "1m30s", 12 * time.Minute: "12m",
		3*time.Hour + 4*time.Minute: "3h4m", 50 * time.Hour: "2d2h", -5 * time.Second: "5s"} {
		if got := Short(d); got != want {
			t.Errorf("Short(%s) = %q, want %q", d, got, want)
		}
	}
}
