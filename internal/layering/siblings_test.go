package layering

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// family is a set of sibling packages of one layer that docs/architecture.md
// keeps apart: each member is one package (and its subpackages) under root,
// reached only through the family's table; a member imports no other member
// but the shared ones.
type family struct {
	root   string
	table  string
	shared []string
}

// families are the sibling rules docs/architecture.md states ("a monitor is
// one package and one line of the table", "a backend is one package and one
// line of the backend table"; what accelerator monitors share is
// pkg/monitors/accel).
var families = []family{
	{root: "pkg/monitors", table: "pkg/monitors", shared: []string{"accel"}},
	{root: "pkg/repair/backend", table: "pkg/repair/backend/backends"},
}

// member is the family member rel belongs to ("nvidia" for
// pkg/monitors/nvidia/dcgm); ok is false for the family's root and table.
func (f family) member(rel string) (string, bool) {
	rest, ok := strings.CutPrefix(rel, f.root+"/")
	if !ok || rel == f.table || f.table != f.root && strings.HasPrefix(rel, f.table+"/") {
		return "", false
	}
	m, _, _ := strings.Cut(rest, "/")
	return m, true
}

// TestSiblingsStayApart: no monitor imports another monitor, no backend
// another backend.
func TestSiblingsStayApart(t *testing.T) {
	pkgs := goList(t, "-json=ImportPath,Imports", "./...")
	for _, v := range siblingViolations(pkgs) {
		t.Error(v)
	}
}

// The rule catches a monitor importing another and a backend importing
// another, and lets through the shared package, a member's own
// subpackages and the tables.
func TestSiblingViolationsAreFound(t *testing.T) {
	got := siblingViolations([]pkg{
		{ImportPath: module + "/pkg/monitors/kernel", Imports: []string{module + "/pkg/monitors/storage", module + "/pkg/monitors/accel", module + "/pkg/monitor"}},
		{ImportPath: module + "/pkg/monitors/nvidia/nvmllib", Imports: []string{module + "/pkg/monitors/nvidia"}},
		{ImportPath: module + "/pkg/monitors", Imports: []string{module + "/pkg/monitors/kernel"}},
		{ImportPath: module + "/pkg/repair/backend/karpenter", Imports: []string{module + "/pkg/repair/backend/clusterapi", module + "/pkg/repair/backend"}},
		{ImportPath: module + "/pkg/repair/backend/backends", Imports: []string{module + "/pkg/repair/backend/karpenter"}},
	})
	want := []string{
		"pkg/monitors/kernel imports pkg/monitors/storage",
		"pkg/repair/backend/karpenter imports pkg/repair/backend/clusterapi",
	}
	if len(got) != len(want) {
		t.Fatalf("violations = %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d = %q, want it to start %q", i, got[i], w)
		}
	}
}

func siblingViolations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, _ := rel(p.ImportPath)
		for _, f := range families {
			fm, ok := f.member(from)
			if !ok {
				continue
			}
			for _, imp := range p.Imports {
				to, inModule := rel(imp)
				if !inModule {
					continue
				}
				if tm, ok := f.member(to); ok && tm != fm && !slices.Contains(f.shared, tm) {
					out = append(out, fmt.Sprintf("%s imports %s: a member of %s imports no other (only %s lists them; shared: %v)", from, to, f.root, f.table, f.shared))
				}
			}
		}
	}
	return out
}
