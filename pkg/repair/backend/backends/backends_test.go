package backends

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
)

// The table's last backend owns every node, so Choose always finds one;
// only it leaves the machine running.
func TestTheFallbackOwnsEveryNodeAndIsLast(t *testing.T) {
	tbl := Table(Deps{})
	last := tbl[len(tbl)-1]
	if !last.Owns(&corev1.Node{}) || last.Name() != backend.Node || last.Engine() {
		t.Fatalf("last backend %s: owns a bare node %v, engine %v; want the Node backend, owning it, no engine", last.Name(), last.Owns(&corev1.Node{}), last.Engine())
	}
	for _, b := range tbl[:len(tbl)-1] {
		if b.Owns(&corev1.Node{}) {
			t.Errorf("%s owns a node with no owner, labels or annotations", b.Name())
		}
		if !b.Engine() {
			t.Errorf("%s is not an engine but is tried before the fallback", b.Name())
		}
	}
	seen := map[string]bool{}
	for _, n := range Names() {
		if seen[n] || n == "" {
			t.Errorf("backend name %q empty or listed twice", n)
		}
		seen[n] = true
	}
}

func TestCheckOverride(t *testing.T) {
	for _, ok := range append([]string{""}, Names()...) {
		if err := CheckOverride(ok); err != nil {
			t.Errorf("CheckOverride(%q): %v", ok, err)
		}
	}
	err := CheckOverride("terraform")
	if err == nil || !strings.Contains(err.Error(), `"terraform"`) || !strings.Contains(err.Error(), backend.ClusterAPI) {
		t.Fatalf("CheckOverride(terraform) = %v, want it refused naming the known backends", err)
	}
}

// What each backend of the table provides: the nodes it owns, whether an
// engine replaces them, how they are pooled for the gate, and what the
// controller watches for that. A backend added to the table without its row
// here fails, as does one that lacks a part its kind needs: an engine pools
// the nodes it owns, and a pool that needs a looked-up object names the
// kind to watch.
func TestWhatEachBackendProvides(t *testing.T) {
	capi := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{
		clusterapi.MachineAnnotation: "m-1", clusterapi.ClusterNamespaceAnnotation: "prod", clusterapi.OwnerKindAnnotation: "MachineSet", clusterapi.OwnerNameAnnotation: "workers-abc"}}}
	rows := map[string]struct {
		owns    *corev1.Node
		engine  bool
		pool    string // the pool of owns, from the node alone; "" for none
		lookup  bool   // its pool depends on a watched object
		watches []schema.GroupKind
	}{
		backend.Karpenter: {owns: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k", Labels: map[string]string{karpenter.NodePoolLabel: "gpu"}}},
			engine: true, pool: "NodePool/gpu"},
		backend.ClusterAPI: {owns: capi, engine: true, pool: "MachineSet/prod/workers-abc", lookup: true,
			watches: []schema.GroupKind{{Group: clusterapi.Group, Kind: "Machine"}}},
		backend.Node: {owns: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}},
	}
	for _, b := range Table(Deps{}) {
		row, ok := rows[b.Name()]
		if !ok {
			t.Errorf("backend %s: no row saying what it provides", b.Name())
			continue
		}
		if !b.Owns(row.owns) || b.Engine() != row.engine {
			t.Errorf("%s: owns %s %v, engine %v; want it owned, engine %v", b.Name(), row.owns.Name, b.Owns(row.owns), b.Engine(), row.engine)
		}
		p, pooled := b.PoolOf(row.owns, nil)
		if got := map[bool]string{true: p.String()}[pooled]; got != row.pool {
			t.Errorf("%s: pools its node in %q, want %q", b.Name(), got, row.pool)
		}
		if b.Engine() && !pooled {
			t.Errorf("%s replaces nodes but pools none of its own: the gate would count them in the cluster group", b.Name())
		}
		if got := b.NeedsLookup(row.owns); got != row.lookup {
			t.Errorf("%s: needs a lookup %v, want %v", b.Name(), got, row.lookup)
		}
		if row.lookup && len(b.Watches()) == 0 {
			t.Errorf("%s: its pools need a looked-up object, but it watches nothing: the lookups would read an empty cache", b.Name())
		}
		if got := b.Watches(); !slices.Equal(got, row.watches) {
			t.Errorf("%s: watches %v, want %v", b.Name(), got, row.watches)
		}
	}
	if len(rows) != len(Table(Deps{})) {
		t.Errorf("%d rows for %d backends: a row for a backend the table does not have", len(rows), len(Table(Deps{})))
	}
	if got, want := Watches(), []schema.GroupKind{{Group: clusterapi.Group, Kind: "Machine"}}; !slices.Equal(got, want) {
		t.Errorf("Watches() = %v, want %v", got, want)
	}
}
