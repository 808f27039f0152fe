package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
)

// A rule whose toleration is not shorter than the quiet period of a
// log-derived reason it acts on could never repair that fault: the policy is
// refused, with both named. A rule limited to reasons that recover by their
// check, or on a condition without log-derived reasons, may wait as long as
// it likes. Where the agents' configuration is unknown, a toleration the
// registry allows is a warning that says why; where it is known, its
// overrides are what the toleration is held to.
func TestTolerationAgainstQuietPeriods(t *testing.T) {
	rule := func(cond string, tol time.Duration, reasons ...string) *v1alpha1.NodeRepairPolicy {
		return &v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.NodeRepairPolicySpec{Rules: []v1alpha1.RepairRule{
			{ConditionType: cond, Status: "False", Toleration: metav1.Duration{Duration: tol}, Reasons: reasons},
		}}}
	}
	registry := RegistryQuietPeriods("the registry")
	unknown := AgentQuietPeriods{Unknown: "ConfigMap nodemend-system/nodemend-agent-config not found"}
	configured := AgentQuietPeriods{Known: true, From: "ConfigMap nodemend-system/nodemend-agent-config",
		Overrides: map[string]time.Duration{health.ReasonForkFailedOutOfPIDs: 20 * time.Minute}}
	for _, tc := range []struct {
		name     string
		obj      *v1alpha1.NodeRepairPolicy
		agents   AgentQuietPeriods
		err      []string
		warnings []string
	}{
		{name: "toleration under the quiet period", obj: rule("KernelReady", 30*time.Minute), agents: registry},
		{name: "toleration equal to the quiet period", obj: rule("KernelReady", 45*time.Minute), agents: registry,
			err: []string{"rule on KernelReady=False: toleration 45m0s is not shorter than the registry's quiet period 45m0s of ForkFailedOutOfPIDs"}},
		{name: "a family of log-derived reasons", obj: rule("AcceleratedHardwareReady", 2*time.Hour, "NvidiaXIDError"), agents: registry,
			err: []string{"toleration 2h0m0s is not shorter than the registry's quiet period 45m0s of NvidiaXID46Error"}},
		{name: "only check-derived reasons", obj: rule("AcceleratedHardwareReady", 2*time.Hour, health.ReasonNvidiaDoubleBitError), agents: registry},
		{name: "a condition without log-derived reasons", obj: rule("NetworkingReady", 2*time.Hour), agents: registry},
		{name: "the kubelet's condition", obj: rule("Ready", 2*time.Hour), agents: registry},
		{name: "agents' override known, toleration above it", obj: rule("KernelReady", 30*time.Minute), agents: configured,
			err: []string{"toleration 30m0s is not shorter than the quiet period 20m0s the agents' configuration (ConfigMap nodemend-system/nodemend-agent-config) gives it of ForkFailedOutOfPIDs"}},
		{name: "agents' override known, toleration under it", obj: rule("KernelReady", 10*time.Minute), agents: configured},
		{name: "agents unknown: warned", obj: rule("KernelReady", 30*time.Minute), agents: unknown,
			warnings: []string{"rule on KernelReady=False (toleration 30m0s)", "the controller does not know it (ConfigMap nodemend-system/nodemend-agent-config not found): ForkFailedOutOfPIDs", "quietPeriod to 30m0s or less"}},
		{name: "agents unknown, toleration under their floor", obj: rule("KernelReady", 30*time.Second), agents: unknown},
		{name: "agents unknown, registry still refuses", obj: rule("StorageReady", time.Hour), agents: unknown,
			err: []string{"not shorter than the registry's quiet period 45m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, warnings, err := FromAPIWith(tc.obj, tc.agents)
			for _, want := range tc.err {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to say %q", err, want)
				}
			}
			if len(tc.err) == 0 && err != nil {
				t.Errorf("refused: %v", err)
			}
			got := strings.Join(warnings, "\n")
			for _, want := range tc.warnings {
				if !strings.Contains(got, want) {
					t.Errorf("warnings %q, want them to say %q", got, want)
				}
			}
			if len(tc.warnings) == 0 && got != "" {
				t.Errorf("warned: %s", got)
			}
		})
	}
	// A refused policy is left out of the set and reported; its nodes get
	// the next policy or the defaults.
	set, problems := NewSet([]v1alpha1.NodeRepairPolicy{*rule("KernelReady", time.Hour)})
	if set.Len() != 0 || len(problems) != 1 || problems[0].Err == nil {
		t.Errorf("set of %d, problems %+v", set.Len(), problems)
	}
}
