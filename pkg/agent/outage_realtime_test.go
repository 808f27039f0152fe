//go:build realtime

package agent

import (
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// TestEveryRequestKindBacksOffThroughARealMinute is
// TestEveryRequestKindBacksOffThroughAnOutage on the real clock: a real
// minute of outage per mode, so that client-go's own real-time waits
// (reflector backoff, the retries of a failed GET) count as they would on
// a node. It waits two minutes and more, so it runs only with the
// realtime build tag (make test-outage-realtime), not in make test.
func TestEveryRequestKindBacksOffThroughARealMinute(t *testing.T) {
	env, k8s := outageEnv(t)
	for _, mode := range []testenv.OutageMode{testenv.Refuse, testenv.CloseAfterRequest} {
		t.Run(mode.String(), func(t *testing.T) {
			outageRun(t, env, k8s, mode, true)
		})
	}
}
