package health_test

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/health"
)

// securityTable is the heading of docs/security.md's table of who can
// trigger each Fatal reason.
const securityTable = "## Who can trigger each Fatal reason"

// guards are the defences a row may name (docs/security.md explains each).
var guards = []string{"**provenance**", "**cgroup**", "**attribution**", "**root only**", "**API lane**", "**genuine**"}

var backticked = regexp.MustCompile("`([A-Za-z0-9]+)`")

// securityRows reads the table: the reasons each row names in its first
// cell, and its other three cells.
func securityRows(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(data, []byte(securityTable+"\n"))
	if !ok {
		t.Fatalf("docs/security.md has no %q section", securityTable)
	}
	rows := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(after))
	sc.Buffer(nil, 1<<20)
	inTable := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Errorf("row with %d cells, want 4: %.80s", len(cells), line)
			continue
		}
		if strings.TrimSpace(cells[0]) == "reason" {
			continue
		}
		names := backticked.FindAllStringSubmatch(cells[0], -1)
		if len(names) == 0 {
			t.Errorf("row names no reason: %.80s", line)
		}
		for _, n := range names {
			if _, dup := rows[n[1]]; dup {
				t.Errorf("%s has two rows", n[1])
			}
			rows[n[1]] = cells[1:]
		}
	}
	return rows
}

// TestSecurityTableCoversEveryFatalReason reads docs/security.md's table
// against the registry: every Fatal reason has a row, every row names only
// Fatal reasons (a reason removed or made a Warning leaves no stale row),
// and each row says whether a pod and a host process can cause the
// evidence and which defence stops a tenant.
func TestSecurityTableCoversEveryFatalReason(t *testing.T) {
	rows := securityRows(t)
	for _, r := range health.Reasons() {
		if r.Severity == health.Fatal {
			if _, ok := rows[r.Name]; !ok {
				t.Errorf("Fatal reason %s has no row in docs/security.md (%s)", r.Name, securityTable)
			}
		}
	}
	for name, cells := range rows {
		r, ok := health.LookupReason(name)
		switch {
		case !ok:
			t.Errorf("docs/security.md has a row for %s, which is not in the registry", name)
		case r.Severity != health.Fatal:
			t.Errorf("docs/security.md has a row for %s, which is %s, not Fatal", name, r.Severity)
		}
		for i, who := range []string{"pod", "host process"} {
			c := strings.TrimSpace(cells[i])
			if !strings.HasPrefix(c, "no") && !strings.HasPrefix(c, "yes") && !strings.HasPrefix(c, "indirectly") {
				t.Errorf("%s: the %s cell must start with no, yes or indirectly: %q", name, who, c)
			}
		}
		guard := cells[2]
		named := false
		for _, g := range guards {
			named = named || strings.Contains(guard, g)
		}
		if !named {
			t.Errorf("%s: the last cell names none of %v: %q", name, guards, guard)
		}
		// What a tenant can set off must be stopped by something other
		// than "only root can": that would be a contradiction.
		if !strings.HasPrefix(strings.TrimSpace(cells[0]), "no") || !strings.HasPrefix(strings.TrimSpace(cells[1]), "no") {
			if strings.Contains(guard, "**root only**") && !strings.ContainsAny(strings.ReplaceAll(guard, "**root only**", ""), "*") {
				t.Errorf("%s: a tenant can cause its evidence, yet the only defence named is root only", name)
			}
		}
	}
}
