package health_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
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
	page, err := os.ReadFile("../../docs/accelerators.md")
	if err != nil {
		t.Fatal(err)
	}
	accel, err := f.RenderAccelerators(page)
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := f.RenderQuietPeriods()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		"../../" + registry.QuietPeriodsPath: quiet,
		"reasons_generated.go":               goSrc,
		"../../docs/reasons.md":              f.RenderDocs(),
		"../../docs/accelerators.md":         accel,
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

// TestEveryReasonIsPinned fails when a reason ships without a line in
// reasons.lock: `make generate` pins additions, and an unpinned reason could
// be renamed or dropped later without TestReasonLockCompatibility noticing.
func TestEveryReasonIsPinned(t *testing.T) {
	f := loadRegistry(t)
	data, err := os.ReadFile("reasons.lock")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), string(f.RenderLock()); got != want {
		t.Errorf("reasons.lock does not pin exactly the registry's reasons: run `make generate`")
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

func TestExpand(t *testing.T) {
	fam, ok := health.Expand("NvidiaXIDError")
	if !ok || !slices.Contains(fam, health.ReasonNvidiaXID79Error) || slices.Contains(fam, health.ReasonNvidiaXID13Warning) {
		t.Fatalf("NvidiaXIDError = %v, %v", fam, ok)
	}
	for _, m := range fam {
		if r, _ := health.LookupReason(m); r.Severity != health.Fatal {
			t.Errorf("NvidiaXIDError member %s is %s", m, r.Severity)
		}
	}
	warn, _ := health.Expand(health.ReasonNvidiaXIDWarning)
	if !slices.Contains(warn, health.ReasonNvidiaXIDWarning) || !slices.Contains(warn, health.ReasonNvidiaXID13Warning) {
		t.Fatalf("NvidiaXIDWarning = %v: the family has the catch-all and the numbered warnings", warn)
	}
	if one, ok := health.Expand(health.ReasonSoftLockup); !ok || !slices.Equal(one, []string{health.ReasonSoftLockup}) {
		t.Fatalf("a reason expands to itself: %v", one)
	}
	if _, ok := health.Expand("NoSuchReason"); ok {
		t.Fatal("an unknown name expanded")
	}
	if got := health.FamiliesOf(health.ReasonNvidiaXID48Error); !slices.Equal(got, []string{"NvidiaXIDError"}) {
		t.Fatalf("health.FamiliesOf(XID48) = %v", got)
	}
}

// TestNoRegistryReasonIsCustom keeps the operator's namespace free: no
// registry reason or family starts with CustomReasonPrefix, now or later.
func TestNoRegistryReasonIsCustom(t *testing.T) {
	for _, r := range health.Reasons() {
		if strings.HasPrefix(r.Name, health.CustomReasonPrefix) {
			t.Errorf("registry reason %s starts with %q, the prefix of operators' reasons", r.Name, health.CustomReasonPrefix)
		}
	}
	if !health.IsCustomReason("CustomAcmeNICLinkReset") || health.IsCustomReason("Custom") || health.IsCustomReason("Customer lost") {
		t.Error("IsCustomReason")
	}
}
