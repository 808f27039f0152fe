package pool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
}

// byLabel is an engine that pools the nodes carrying its label, from the
// node alone or (lookup) only through a watched object. The engines' real
// groupings are tested with the backend table (pkg/repair/backend/backends).
type byLabel struct {
	label  string
	lookup bool
}

func (e byLabel) PoolOf(n *corev1.Node, machines MachineLookup) (Pool, bool) {
	v := n.Labels[e.label]
	if v == "" || e.lookup && machines == nil {
		return Pool{}, false
	}
	return Pool{Group: "x", Kind: e.label, Name: v}, true
}

func (e byLabel) NeedsLookup(n *corev1.Node) bool { return e.lookup && n.Labels[e.label] != "" }

// The configured label wins, then the engines in order, then the cluster
// group; a node needs a lookup only when the first engine to claim it
// needs one.
func TestResolverAsksTheLabelThenTheEnginesInOrder(t *testing.T) {
	r := Resolver{Label: "pool", Engines: []Engine{byLabel{label: "a"}, byLabel{label: "b", lookup: true}}}
	none := func(string, string) (Machine, bool) { return Machine{}, false }
	for _, tt := range []struct {
		labels map[string]string
		want   string
		needs  bool
	}{
		{nil, "cluster", false},
		{map[string]string{"pool": "p", "a": "1", "b": "2"}, "label/pool=p", false},
		{map[string]string{"a": "1", "b": "2"}, "a/1", false},
		{map[string]string{"b": "2"}, "b/2", true},
	} {
		n := node(tt.labels)
		if got := r.Of(n, none).String(); got != tt.want {
			t.Errorf("Of(%v) = %s, want %s", tt.labels, got, tt.want)
		}
		if got := r.NeedsMachine(n); got != tt.needs {
			t.Errorf("NeedsMachine(%v) = %v, want %v", tt.labels, got, tt.needs)
		}
	}
}
