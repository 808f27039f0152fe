package deploytest

import (
	"testing"

	"nodemend.dev/nodemend/pkg/agent/config"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

// The controller reads the agents' quiet periods without the agent's config
// package (internal/layering): it must read them as the agent applies
// them, and refuse what the agent refuses. Each file is read by both; every
// log-derived reason's quiet period must agree.
func TestControllerReadsQuietPeriodsAsTheAgentDoes(t *testing.T) {
	for _, file := range []string{
		"",
		"reasons:\n  NvidiaXIDError:\n    quietPeriod: 20m\n",
		"reasons:\n  NvidiaXIDError:\n    quietPeriod: 20m\n  NvidiaXID79Error:\n    quietPeriod: 2h\n",
		"reasons:\n  NvidiaXID79Error:\n    quietPeriod: 2h\n  NvidiaXIDError:\n    quietPeriod: 1m\n",
		"reasons:\n  ForkFailedOutOfPIDs:\n    quietPeriod: 5m\n    severity: Warning\n  NvidiaXID46Error:\n    disabled: true\n",
		"reasons:\n  ForkFailedOutOfPIDs:\n    quietPeriod: 5m\n  NoSuchReason:\n    disabled: true\n",
		"reasons:\n  NvidiaXIDWarning:\n    quietPeriod: 3m\n",
		"reasons:\n  DCGMHealthCode:\n    quietPeriod: 3m\n",
		"reasons:\n  NvidiaXIDError:\n    quietPeriod: 59s\n",
		"reasons:\n  NoSuchReason:\n    quietPeriod: 20m\n",
		"reasons:\n  " + health.ReasonNvidiaDoubleBitError + ":\n    quietPeriod: 20m\n",
	} {
		agent, agentErr := config.Parse([]byte(file))
		controller, controllerErr := policy.ParseAgentQuietPeriods([]byte(file), "test")
		if (agentErr != nil) != (controllerErr != nil) {
			t.Errorf("%q: the agent says %v, the controller %v", file, agentErr, controllerErr)
			continue
		}
		if agentErr != nil {
			continue
		}
		for _, r := range health.Reasons() {
			if r.Source != health.FromLog {
				continue
			}
			want := r.QuietPeriod
			if e, ok := agent.Effective(r.Name); ok {
				want = e.QuietPeriod
			}
			got, ok := controller.Overrides[r.Name]
			if !ok {
				got = r.QuietPeriod
			}
			if got != want {
				t.Errorf("%q: %s: the controller reads %v, the agent applies %v", file, r.Name, got, want)
			}
		}
	}
}
