package networking

import (
	"regexp"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// The shared helpers live in internal/testsupport/monitortest; these names keep the
// tests short.
var (
	testEnv  = monitortest.Env
	reasons  = monitortest.Reasons
	runCheck = func(t *testing.T, m *Monitor, name string) ([]detection.Finding, error) {
		t.Helper()
		return monitortest.RunCheck(t, m, name)
	}
)

// defaultExclusion is the monitor's exclusion with the defaults.
func defaultExclusion() exclusion {
	return exclusion{names: regexp.MustCompile(DefaultExcludeInterfaces), types: normalizeLinkTypes(DefaultExcludeLinkTypes)}
}
