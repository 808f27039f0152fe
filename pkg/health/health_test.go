package health_test

import (
	"bytes"
	"os"
	"testing"

	"nodemend.dev/nodemend/hack/genreasons/registry"
	"nodemend.dev/nodemend/pkg/health"
)

func loadRegistry(t *testing.T) *registry.File {
	t.Helper()
	data, err := os.ReadFile("reasons.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := registry.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGeneratedFilesAreCurrent fails when reasons.yaml changed without
// `make generate`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	f := loadRegistry(t)
	goSrc, err := f.RenderGo()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		"reasons_generated.go":  goSrc,
		"../../docs/reasons.md": f.RenderDocs(),
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate`", path)
		}
	}
}

// TestReasonLockCompatibility fails when a released reason was renamed,
// removed, or changed condition or severity.
func TestReasonLockCompatibility(t *testing.T) {
	f := loadRegistry(t)
	data, err := os.ReadFile("reasons.lock")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := registry.ParseLock(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CheckCompatible(lock); err != nil {
		t.Fatal(err)
	}
}

func TestGeneratedTableMatchesRegistry(t *testing.T) {
	f := loadRegistry(t)
	got := health.Reasons()
	if len(got) != len(f.Reasons) {
		t.Fatalf("generated table has %d reasons, registry %d", len(got), len(f.Reasons))
	}
	for _, name := range []string{"ForkFailedOutOfPIDs", "PodStuckTerminating"} {
		r, ok := health.LookupReason(name)
		if !ok || r.Severity != health.Fatal {
			t.Errorf("%s: want a Fatal reason, got %+v (found %v)", name, r, ok)
		}
	}
	if r, _ := health.LookupReason("ForkFailedOutOfPIDs"); r.QuietPeriod <= 30*60e9 {
		t.Errorf("ForkFailedOutOfPIDs quiet period %v must exceed the 30m repair toleration", r.QuietPeriod)
	}
}

func TestOwnership(t *testing.T) {
	for _, kubelet := range []string{"Ready", "DiskPressure", "MemoryPressure", "PIDPressure", "NetworkUnavailable"} {
		if health.IsOwned(kubelet) {
			t.Errorf("%s must never be owned by nodemend", kubelet)
		}
	}
	for _, c := range health.ConditionTypes() {
		if !health.IsOwned(string(c)) {
			t.Errorf("%s should be owned", c)
		}
	}
}

func TestSeverityOrder(t *testing.T) {
	if !health.Info.AtMost(health.Warning) || !health.Warning.AtMost(health.Fatal) || health.Fatal.AtMost(health.Warning) {
		t.Fatal("severity order must be Info < Warning < Fatal")
	}
}
