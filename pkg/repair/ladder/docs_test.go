package ladder

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

// Every table of docs/accelerators.md with a "default ladder (no engine)"
// column (the XIDs, Neuron, AMD) shows, for each Fatal reason, the ladder
// Resolve gives a node no engine owns with no policy ladder, and for each
// Warning that it is only an Event. The docs follow the code, not a copy of
// the catalogue.
func TestAcceleratorsDocLadderColumnIsResolves(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "accelerators.md"))
	if err != nil {
		t.Fatal(err)
	}
	reasonCell := regexp.MustCompile("^`([A-Za-z0-9]+)`$")
	inTable, seen := false, map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "|") {
			inTable = false
			continue
		}
		if strings.HasSuffix(l, "| default ladder (no engine) |") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		var reason, severity string
		for _, c := range cells {
			if m := reasonCell.FindStringSubmatch(c); m != nil && reason == "" {
				reason = m[1]
			}
			if s := strings.Trim(c, "*"); s == "Fatal" || s == "Warning" {
				severity = s
			}
		}
		r, known := health.LookupReason(reason)
		if !known || string(r.Severity) != severity {
			t.Errorf("row %q: reason %q severity %q, the registry says %+v (known %v)", l, reason, severity, r, known)
			continue
		}
		want := "— (an Event)"
		if r.Severity == health.Fatal {
			var names []string
			for _, rung := range Resolve(policy.Policy{}, false, reason) {
				names = append(names, string(rung.Action))
			}
			want = strings.Join(names, " → ")
		}
		if got := cells[len(cells)-1]; got != want {
			t.Errorf("%s: docs say %q, Resolve gives %q", reason, got, want)
		}
		seen[reason[:3]]++
	}
	// The three families are each checked (Nvi, Neu, AMD).
	if seen["Nvi"] < 15 || seen["Neu"] < 5 || seen["AMD"] < 7 {
		t.Errorf("rows checked per family: %v", seen)
	}
}
