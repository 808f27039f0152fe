package health

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every reason with a remedy is a Fatal accelerator reason of the registry.
func TestRemediesAreFatalAcceleratorReasons(t *testing.T) {
	for r := range catalogueRemedies {
		reason, ok := LookupReason(r)
		if !ok || reason.Condition != AcceleratedHardwareReady || reason.Severity != Fatal {
			t.Errorf("%s: %+v (known %v), want a Fatal AcceleratedHardwareReady reason", r, reason, ok)
		}
	}
}

// docs/accelerators.md's XID table shows each Fatal XID's default ladder,
// and it is this table's.
func TestAcceleratorsDocShowsTheDefaultLadder(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "accelerators.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| \\d+ \\|.*\\| \\*\\*Fatal\\*\\* \\| `(NvidiaXID\\d+Error)` \\|.*\\| ([A-Za-z →]+) \\|$")
	seen := 0
	for _, l := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		seen++
		want := "Reboot → Quarantine"
		switch CatalogueRemedy(m[1]) {
		case RemedyResetGPU:
			want = "ResetAccelerator → Reboot → Quarantine"
		}
		if strings.TrimSpace(m[2]) != want {
			t.Errorf("%s: docs say %q, the default ladder is %q", m[1], m[2], want)
		}
	}
	if seen < 15 {
		t.Errorf("found %d Fatal XID rows with a ladder column in docs/accelerators.md", seen)
	}
}
