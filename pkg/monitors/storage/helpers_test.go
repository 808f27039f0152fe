package storage

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
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

// withMount returns DefaultMounts with the mount at point changed by f.
func withMount(point string, f func(*hostroot.Mount)) []hostroot.Mount {
	ms := append([]hostroot.Mount(nil), hostroot.DefaultMounts...)
	for i := range ms {
		if ms[i].Point == point {
			f(&ms[i])
		}
	}
	return ms
}
