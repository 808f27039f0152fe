package rungs

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the rung table in docs/repair.md")

// Each rung says everything its readers need, and nothing that does not
// apply to it: an agent rung has an order, a timeout and a proof; a rung
// that ends the ladder has none of them.
func TestEveryRungIsComplete(t *testing.T) {
	actions, orders, shorts := map[v1alpha1.LadderAction]bool{}, map[v1alpha1.HostAction]bool{}, map[string]bool{}
	for _, r := range Table() {
		if r.Action == "" || actions[r.Action] {
			t.Errorf("rung %+v: action empty or listed twice", r)
		}
		actions[r.Action] = true
		if r.Short == "" || shorts[r.Short] || r.Short != strings.ToLower(r.Short) {
			t.Errorf("%s: short name %q empty, not lower case or listed twice", r.Action, r.Short)
		}
		shorts[r.Short] = true
		if r.Does == "" || r.Proved == "" {
			t.Errorf("%s: no docs (Does, Proved)", r.Action)
		}
		switch r.By {
		case Agent:
			if r.Order == "" || orders[r.Order] {
				t.Errorf("%s: an agent rung needs an order action of its own, has %q", r.Action, r.Order)
			}
			orders[r.Order] = true
			if r.Terminal() || r.Timeout <= 0 || r.Done == "" || r.VerifiedBy == "" {
				t.Errorf("%s: an agent rung is verified (proof %s, done %q, verified by %q) within a timeout (%s)", r.Action, r.Proof, r.Done, r.VerifiedBy, r.Timeout)
			}
		case Controller, Engine:
			if r.Order != "" || r.Timeout != 0 || r.OncePerBoot {
				t.Errorf("%s: carried out by the %s, yet has an order %q, a timeout %s or once per boot %v", r.Action, r.By, r.Order, r.Timeout, r.OncePerBoot)
			}
			if !r.Terminal() {
				// The controller judges only orders (pkg/repair/ladder.Judge):
				// a rung it or an engine carries out ends the ladder.
				t.Errorf("%s: carried out by the %s but does not end the ladder", r.Action, r.By)
			}
		default:
			t.Errorf("%s: carried out by %q", r.Action, r.By)
		}
		if got, ok := Lookup(r.Action); !ok || got.Action != r.Action {
			t.Errorf("Lookup(%s) = %v, %v", r.Action, got.Action, ok)
		}
		if got, ok := ForOrder(r.Order); r.By == Agent && (!ok || got.Action != r.Action) {
			t.Errorf("ForOrder(%s) = %v, %v", r.Order, got.Action, ok)
		}
	}
	if _, ok := Lookup("Pray"); ok {
		t.Error("Lookup found a rung that is not in the table")
	}
	if _, ok := ForOrder(""); ok {
		t.Error("ForOrder found a rung for no order")
	}
}

// The API's enums, its validation switch and the CRD's rule on terminal
// rungs are written in api/v1alpha1 (controller-gen reads markers, not
// this table); they must say what the table says.
func TestTheAPISaysWhatTheTableSays(t *testing.T) {
	var names, orders, terminal []string
	for _, r := range Table() {
		names = append(names, string(r.Action))
		if r.By == Agent {
			orders = append(orders, string(r.Order))
		}
		if r.Terminal() {
			terminal = append(terminal, string(r.Action))
		}
		if !r.Action.Valid() {
			t.Errorf("%s: v1alpha1.LadderAction.Valid says no", r.Action)
		}
	}
	if v1alpha1.LadderAction("Pray").Valid() {
		t.Error("v1alpha1.LadderAction.Valid accepts an action no rung has")
	}
	if got := enum(t, "noderepairpolicy_types.go", "LadderAction"); !slices.Equal(got, names) {
		t.Errorf("LadderAction's enum marker is %v, the table's rungs %v", got, names)
	}
	// The order of an enum marker is the CRD's; as sets they must agree.
	slices.Sort(orders)
	got := enum(t, "noderemediation_types.go", "HostAction")
	slices.Sort(got)
	if !slices.Equal(got, orders) {
		t.Errorf("HostAction's enum marker is %v, the table's agent orders %v", got, orders)
	}
	src := read(t, "..", "..", "api", "v1alpha1", "noderepairpolicy_types.go")
	rule := regexp.MustCompile(`(?m)^\s*// \+kubebuilder:validation:XValidation:rule="(.*)",message="Replace or Quarantine may only be the last rung"`).FindStringSubmatch(src)
	if rule == nil {
		t.Fatal("the ladder's rule on terminal rungs not found")
	}
	var inRule []string
	for _, m := range regexp.MustCompile(`r\.action == '([A-Za-z]+)'`).FindAllStringSubmatch(rule[1], -1) {
		if !slices.Contains(inRule, m[1]) {
			inRule = append(inRule, m[1])
		}
	}
	if !slices.Equal(inRule, terminal) {
		t.Errorf("the CRD's last-rung rule names %v, the table's terminal rungs are %v", inRule, terminal)
	}
}

// enum is the +kubebuilder:validation:Enum marker of type typ in file.
func enum(t *testing.T, file, typ string) []string {
	t.Helper()
	src := read(t, "..", "..", "api", "v1alpha1", file)
	m := regexp.MustCompile(`// \+kubebuilder:validation:Enum=([A-Za-z;]+)\ntype ` + typ + ` string`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no enum marker on type %s", file, typ)
	}
	return strings.Split(m[1], ";")
}

// docs/repair.md's rung table is this table (go test ./pkg/rungs -update
// rewrites it).
func TestDocsTableIsTheTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "repair.md")
	doc := read(t, path)
	const begin, end = "<!-- rungs:begin (pkg/rungs) -->\n", "<!-- rungs:end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q … %q block", path, begin, end)
	}
	want := DocTable()
	if got := doc[i+len(begin) : j]; got != want {
		if *update {
			if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's rung table is not the table (go test ./pkg/rungs -update):\n%s\nwant:\n%s", path, got, want)
	}
}

func read(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
