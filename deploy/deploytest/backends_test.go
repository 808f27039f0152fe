package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"nodemend.dev/nodemend/pkg/repair/backend/backends"
)

// The chart's controller.backend enum is the backend table's names and ""
// (choose per node): a backend added to the table is selectable in the
// chart, and the chart offers none the controller would refuse.
func TestChartBackendsAreTheTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Controller struct {
				Properties struct {
					Backend struct {
						Enum []string `json:"enum"`
					} `json:"backend"`
				} `json:"properties"`
			} `json:"controller"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.Controller.Properties.Backend.Enum
	want := append([]string{""}, backends.Names()...)
	if !slices.Equal(got, want) {
		t.Fatalf("values.schema.json controller.backend enum = %q, want %q (\"\" and backends.Table's names)", got, want)
	}
}
