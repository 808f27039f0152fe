package backends

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/repair/backend"
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
