package cli

import (
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// benchFleet is n nodes as a real fleet looks: 20 NodePools, 3 zones, the
// kubelet's conditions and nodemend's five, one node in 50 unhealthy and
// one in 200 under repair.
func benchFleet(n int, now time.Time) []*corev1.Node {
	nodes := make([]*corev1.Node, n)
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("ip-10-%d-%d-%d.ec2.internal", i/65536, i/256%256, i%256),
			Labels: map[string]string{karpenter.NodePoolLabel: fmt.Sprintf("pool-%d", i%20), pool.ZoneLabel: fmt.Sprintf("us-east-1%c", 'a'+i%3),
				corev1.LabelInstanceTypeStable: "p5.48xlarge", corev1.LabelHostname: fmt.Sprintf("h%d", i)},
			Annotations: map[string]string{},
		}}
		t := metav1.NewTime(now.Add(-24 * time.Hour))
		conds := []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastTransitionTime: t},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastTransitionTime: t},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastTransitionTime: t},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: t},
		}
		for _, ct := range health.ConditionTypes() {
			conds = append(conds, corev1.NodeCondition{Type: corev1.NodeConditionType(ct), Status: corev1.ConditionTrue, Reason: string(ct) + "IsReady", LastTransitionTime: t})
		}
		if i%50 == 7 {
			conds[4].Status, conds[4].Reason, conds[4].LastTransitionTime = corev1.ConditionFalse, "KernelBug", metav1.NewTime(now.Add(-time.Duration(i%40)*time.Minute))
		}
		if i%200 == 3 {
			node.Annotations[record.StateAnnotation] = v1alpha1.RepairRecord{Phase: record.PhaseDraining, Started: metav1.NewTime(now.Add(-2 * time.Minute)),
				Trigger: &v1alpha1.RepairTrigger{Type: "KernelReady", Status: "False", Reason: "KernelBug"}}.Encode()
		}
		node.Status.Conditions = conds
		nodes[i] = node
	}
	return nodes
}

// BenchmarkStatus5000 is `kubectl mend status` on 5,000 nodes after the
// lists: the assessment (every node's state and every pool's gate) and the
// table, coloured.
func BenchmarkStatus5000(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := benchFleet(5000, now)
	set, _ := policy.NewSet(nil)
	view := statusView{palette: Palette{on: true}, selector: labels.Everything(), nodeLabels: labelsByName(nodes)}
	b.ReportAllocs()
	for b.Loop() {
		r := fleet.Assess(fleet.Input{Nodes: nodes, Policies: set, Pools: backends.Pools(""), Now: now})
		if err := view.render(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatus5000JSON is the same with -o json.
func BenchmarkStatus5000JSON(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := benchFleet(5000, now)
	set, _ := policy.NewSet(nil)
	view := statusView{output: OutputJSON}
	b.ReportAllocs()
	for b.Loop() {
		if err := view.render(io.Discard, fleet.Assess(fleet.Input{Nodes: nodes, Policies: set, Pools: backends.Pools(""), Now: now})); err != nil {
			b.Fatal(err)
		}
	}
}
