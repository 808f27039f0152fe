package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
)

const from = "ConfigMap nodemend-system/nodemend-agent-config"

// The agents' quietPeriod overrides are read as the agent applies them: a
// family's entry gives every member its period, a reason's own entry wins
// over its family's whatever the order of the file; the other sections of
// the file are not the controller's business.
func TestParseAgentQuietPeriods(t *testing.T) {
	agents, err := ParseAgentQuietPeriods([]byte(`
monitors:
  kernel: {enabled: true}
exporter:
  heartbeat: 5m
reasons:
  NvidiaXID109Error:
    quietPeriod: 30m
  NvidiaXIDError:
    quietPeriod: 20m
    severity: Warning
  ForkFailedOutOfPIDs:
    quietPeriod: 10m
  `+health.ReasonNvidiaDoubleBitError+`:
    disabled: true
`), from)
	if err != nil {
		t.Fatal(err)
	}
	if !agents.Known || agents.From != from {
		t.Errorf("known %v from %q", agents.Known, agents.From)
	}
	for reason, want := range map[string]struct {
		d     time.Duration
		setBy string
	}{
		"NvidiaXID109Error":              {30 * time.Minute, "NvidiaXID109Error"},
		"NvidiaXID46Error":               {20 * time.Minute, "NvidiaXIDError"},
		health.ReasonForkFailedOutOfPIDs: {10 * time.Minute, health.ReasonForkFailedOutOfPIDs},
	} {
		if got := agents.Overrides[reason]; got != want.d {
			t.Errorf("%s: quiet period %v, want %v", reason, got, want.d)
		}
		if got := agents.SetBy[reason]; got != want.setBy {
			t.Errorf("%s: set by %q, want %q", reason, got, want.setBy)
		}
	}
	if d, ok := agents.Overrides[health.ReasonNvidiaDoubleBitError]; ok {
		t.Errorf("%s has no quietPeriod entry, got %v", health.ReasonNvidiaDoubleBitError, d)
	}

	// A file without a reasons section: the registry's periods, known.
	agents, err = ParseAgentQuietPeriods([]byte("exporter:\n  heartbeat: 5m\n"), from)
	if err != nil || !agents.Known || len(agents.Overrides) != 0 {
		t.Errorf("no reasons: %+v, %v", agents, err)
	}
}

// An entry the agent refuses makes the agent refuse the whole file: what it
// runs is not that file, so the controller does not take it for known.
func TestParseAgentQuietPeriodsRefusesWhatTheAgentRefuses(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"reasons:\n  NvidiaXIDError:\n    quietPeriod: 20 minutes\n", "time: unknown unit"},
		{"reasons:\n  NvidiaXIDError:\n    quietPeriod: 1200\n", "duration must be a string"},
		{"reasons:\n  NvidiaXIDError:\n    quietPeriod: 30s\n", "reasons.NvidiaXIDError.quietPeriod: 30s is shorter than the 1m0s floor"},
		{"reasons:\n  NoSuchReason:\n    quietPeriod: 20m\n", "reasons.NoSuchReason: unknown reason or family"},
		{"reasons:\n  NoSuchReason:\n    disabled: true\n", "reasons.NoSuchReason: unknown reason or family"},
		{"reasons:\n  " + health.ReasonNvidiaDoubleBitError + ":\n    quietPeriod: 20m\n", "only log-derived reasons have a quiet period"},
		{"reasons: [a, b]\n", "not an agent config"},
		{"{{{", "not an agent config"},
	} {
		agents, err := ParseAgentQuietPeriods([]byte(tc.file), from)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %+v, error %v; want one saying %q", tc.file, agents, err, tc.want)
		}
	}
}

// A policy refused under the agents' override names the entry that set it
// and where it was read.
func TestRefusalNamesTheOverride(t *testing.T) {
	agents, err := ParseAgentQuietPeriods([]byte("reasons:\n  NvidiaXIDError:\n    quietPeriod: 20m\n"), from)
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{
		{ConditionType: "AcceleratedHardwareReady", Status: "False", Toleration: metav1.Duration{Duration: 30 * time.Minute}},
	}}}
	_, _, err = FromAPIWith(p, agents)
	want := "the quiet period 20m0s the agents' configuration (reasons.NvidiaXIDError.quietPeriod in " + from + ") gives it of NvidiaXID"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to say %q", err, want)
	}
}
