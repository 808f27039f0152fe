package configdoc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../../.."

// docs/configuration.md is what the config types say now.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := Render(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, DocPath))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (%v); run `go run ./hack/genconfigdoc`", DocPath, err)
	}
}

// Every key is described: a field without a doc comment fails here.
func TestEveryKeyIsDescribed(t *testing.T) {
	page, err := Render(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(page), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		if desc := strings.TrimSuffix(cells[len(cells)-1], " |"); strings.TrimSpace(strings.TrimPrefix(desc, "See")) == "" || strings.HasPrefix(desc, " See") {
			t.Errorf("no description: %s", line)
		}
	}
	for _, key := range []string{"monitors.kernel.checkInterval", "monitors.nvidia.nvmlLibrary", "reasons.<reason>.severity", "exporter.coalesce"} {
		if !strings.Contains(string(page), "| `"+key+"` |") {
			t.Errorf("no row for %s", key)
		}
	}
}
