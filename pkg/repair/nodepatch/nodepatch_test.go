package nodepatch_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/nodepatch"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// node is shaped like a cached node of a real cluster: labels, annotations
// of other owners, a foreign taint, conditions, addresses, capacity.
func node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "ip-10-0-1-17.ec2.internal", UID: "7f0c", ResourceVersion: "48211",
			Labels: map[string]string{
				"kubernetes.io/hostname": "ip-10-0-1-17", "topology.kubernetes.io/zone": "us-east-1a",
				"node.kubernetes.io/instance-type": "p5.48xlarge",
			},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{
			ProviderID: "aws:///us-east-1a/i-0abc",
			Taints:     []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2063937Mi")},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
				{Type: "AcceleratedHardwareReady", Status: corev1.ConditionFalse, Reason: "NvidiaXID79", Message: "GPU has fallen off the bus", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.17"}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.34.2", BootID: "b-1"},
		},
	}
}

// steps are the repair's writes, each from the record the previous one
// left, as the controller makes them (record.Apply puts each on the
// node).
func steps() []struct {
	name string
	to   func(record.Record, *corev1.Node) record.Record
} {
	attempt := ladder.Attempt{RungPosition: ladder.First, Action: v1alpha1.LadderReboot, Started: metav1.NewTime(now)}
	trigger := node().Status.Conditions[1]
	since := unhealthy.Since{trigger.Type: now.Add(-time.Minute)}
	type step = func(record.Record, *corev1.Node) record.Record
	return []struct {
		name string
		to   step
	}{
		{"unhealthy recorded", func(r record.Record, _ *corev1.Node) record.Record { return record.WithSince(r, since) }},
		{"started (tainted)", func(r record.Record, _ *corev1.Node) record.Record {
			return record.Start(r, since, trigger, "gpu", attempt, now, nil)
		}},
		{"remediating", func(r record.Record, _ *corev1.Node) record.Record { return record.Remediate(r, attempt) }},
		{"attempt recorded", func(r record.Record, _ *corev1.Node) record.Record { return record.WithAttempt(r, attempt) }},
		{"quarantined (cordoned)", func(r record.Record, n *corev1.Node) record.Record {
			return record.Quarantine(r, attempt, !n.Spec.Unschedulable, now)
		}},
		{"healthy since", func(r record.Record, _ *corev1.Node) record.Record { return record.WithHealthySince(r, now) }},
		{"returned (uncordoned, untainted)", func(record.Record, *corev1.Node) record.Record {
			return record.Return(&ladder.Record{Condition: trigger.Type, RungPosition: ladder.Position{Rung: 1, Attempt: 1}, Action: v1alpha1.LadderReboot,
				Returned: metav1.NewTime(now), Until: metav1.NewTime(now.Add(time.Hour))})
		}},
		{"ladder gone", func(r record.Record, _ *corev1.Node) record.Record { return record.WithoutLadder(r) }},
		{"started again (asked for now)", func(r record.Record, _ *corev1.Node) record.Record {
			return record.Start(r, since, trigger, "gpu", attempt, now, record.RepairNowAt("INC-1", now))
		}},
		{"handed over", func(r record.Record, n *corev1.Node) record.Record {
			return record.HandOver(r, backend.Target{Kind: "Node", Name: n.Name}, now)
		}},
		{"failed", func(r record.Record, _ *corev1.Node) record.Record { return record.Fail(r, now) }},
		{"recovered (since cleared)", func(r record.Record, _ *corev1.Node) record.Record { return record.WithSince(r, nil) }},
	}
}

// TestMergeMeansWhatTheWholeNodeDiffMeans walks a repair's writes and checks
// that each patch, applied to the old node's JSON as a JSON merge patch and
// as a strategic merge patch, gives the same node as controller-runtime's
// diff of the two whole nodes, with and without the lock.
func TestMergeMeansWhatTheWholeNodeDiffMeans(t *testing.T) {
	for _, lock := range []bool{false, true} {
		old := node()
		var rec record.Record
		for _, s := range steps() {
			next := s.to(rec, old)
			updated := record.Apply(old, rec, next)
			rec = next
			got, ok, err := nodepatch.Merge(old, updated, lock)
			if err != nil || !ok {
				t.Fatalf("%s: Merge = ok %v, %v; want a patch", s.name, ok, err)
			}
			want := wholeDiff(t, old, updated, lock)
			if a, b := strategic(t, old, got), applied(t, old, want); !equality.Semantic.DeepEqual(a, b) {
				t.Errorf("%s (lock %v): patch %s as a strategic merge patch gives\n%+v\nthe whole-node diff %s gives\n%+v", s.name, lock, got, a.ObjectMeta, want, b.ObjectMeta)
			}
			if a, b := applied(t, old, got), applied(t, old, want); !equality.Semantic.DeepEqual(a, b) {
				t.Errorf("%s (lock %v): patch %s gives\n%+v\nthe whole-node diff %s gives\n%+v", s.name, lock, got, a.ObjectMeta, want, b.ObjectMeta)
			}
			if a := applied(t, old, got); !equality.Semantic.DeepEqual(withoutRV(a), withoutRV(updated)) {
				t.Errorf("%s: patch %s does not give the updated node", s.name, got)
			}
			if hasRV := strings.Contains(string(got), `"resourceVersion":"48211"`); hasRV != lock {
				t.Errorf("%s: lock %v but patch %s", s.name, lock, got)
			}
			old = updated
		}
	}
}

// TestMergeRemovesWhatWasRemoved: keys, lists and flags that go are null in
// the patch, and nothing is written for what did not change.
func TestMergeRemovesWhatWasRemoved(t *testing.T) {
	old := node()
	old.Spec.Unschedulable = true
	updated := old.DeepCopy()
	delete(updated.Annotations, "node.alpha.kubernetes.io/ttl")
	delete(updated.Labels, "node.kubernetes.io/instance-type")
	updated.Spec.Taints = nil
	updated.Spec.Unschedulable = false
	got, ok, err := nodepatch.Merge(old, updated, false)
	if err != nil || !ok {
		t.Fatalf("Merge = ok %v, %v", ok, err)
	}
	want := `{"metadata":{"annotations":{"node.alpha.kubernetes.io/ttl":null},"labels":{"node.kubernetes.io/instance-type":null}},"spec":{"taints":null,"unschedulable":null}}`
	if string(got) != want {
		t.Errorf("patch\n%s\nwant\n%s", got, want)
	}
	same, ok, err := nodepatch.Merge(old, old.DeepCopy(), false)
	if err != nil || !ok || string(same) != "{}" {
		t.Errorf("no change: patch %s, ok %v, %v; want {}", same, ok, err)
	}
	// An empty taint list is no taint list: nothing to write.
	empty := old.DeepCopy()
	old.Spec.Taints, empty.Spec.Taints = nil, []corev1.Taint{}
	if p, _, _ := nodepatch.Merge(old, empty, false); string(p) != "{}" {
		t.Errorf("nil → empty taints: patch %s, want {}", p)
	}
}

// TestMergeRefusesOtherFields: a change the package does not write (status,
// other spec fields, other metadata) is left to the whole-node diff.
func TestMergeRefusesOtherFields(t *testing.T) {
	for name, change := range map[string]func(*corev1.Node){
		"status condition": func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse },
		"provider ID":      func(n *corev1.Node) { n.Spec.ProviderID = "aws:///other" },
		"finalizers":       func(n *corev1.Node) { n.Finalizers = append(n.Finalizers, "x") },
		"taint and status": func(n *corev1.Node) { n.Spec.Taints = nil; n.Status.NodeInfo.BootID = "b-2" },
	} {
		updated := node()
		change(updated)
		if p, ok, err := nodepatch.Merge(node(), updated, true); ok || p != nil || err != nil {
			t.Errorf("%s: Merge = %s, ok %v, %v; want refused", name, p, ok, err)
		}
	}
	// The resourceVersion alone is not a change (the cache may be newer).
	newer := node()
	newer.ResourceVersion = "48300"
	if p, ok, _ := nodepatch.Merge(node(), newer, false); !ok || string(p) != "{}" {
		t.Errorf("resourceVersion only: patch %s ok %v, want {}", p, ok)
	}
}

// wholeDiff is controller-runtime's patch of the two whole nodes.
func wholeDiff(t *testing.T, old, updated *corev1.Node, lock bool) []byte {
	t.Helper()
	p := client.MergeFrom(old)
	if lock {
		p = client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})
	}
	data, err := p.Data(updated)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// applied applies patch to old's JSON as a JSON merge patch.
func applied(t *testing.T, old *corev1.Node, patch []byte) *corev1.Node {
	t.Helper()
	return applyWith(t, old, patch, jsonpatch.MergePatch)
}

// strategic applies patch as the API server applies a strategic merge patch
// to a node.
func strategic(t *testing.T, old *corev1.Node, patch []byte) *corev1.Node {
	t.Helper()
	return applyWith(t, old, patch, func(doc, patch []byte) ([]byte, error) {
		return strategicpatch.StrategicMergePatch(doc, patch, corev1.Node{})
	})
}

func applyWith(t *testing.T, old *corev1.Node, patch []byte, apply func(doc, patch []byte) ([]byte, error)) *corev1.Node {
	t.Helper()
	doc, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	out, err := apply(doc, patch)
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(out, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// withoutRV normalises what a JSON round trip cannot tell apart: the
// resourceVersion (the patch's precondition, not a change) and nil against
// empty collections.
func withoutRV(n *corev1.Node) *corev1.Node {
	n = n.DeepCopy()
	n.ResourceVersion = ""
	if len(n.Annotations) == 0 {
		n.Annotations = nil
	}
	if len(n.Labels) == 0 {
		n.Labels = nil
	}
	if len(n.Spec.Taints) == 0 {
		n.Spec.Taints = nil
	}
	return n
}

// BenchmarkMerge: the repair's start (annotations and the taint) as this
// package writes it, against the whole-node diff it replaces.
func BenchmarkMerge(b *testing.B) {
	old := node()
	trigger := old.Status.Conditions[1]
	attempt := ladder.Attempt{Action: v1alpha1.LadderReboot, Started: metav1.NewTime(now)}
	updated := record.Apply(old, record.Record{}, record.Start(record.Record{}, unhealthy.Since{trigger.Type: now}, trigger, "gpu", attempt, now, nil))
	b.Run("nodepatch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := nodepatch.Merge(old, updated, true); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("MergeFrom", func(b *testing.B) {
		b.ReportAllocs()
		p := client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})
		for b.Loop() {
			if _, err := p.Data(updated); err != nil {
				b.Fatal(err)
			}
		}
	})
}
