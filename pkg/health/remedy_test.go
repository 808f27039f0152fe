package health

import "testing"

// Every reason with a remedy is a Fatal accelerator reason of the registry.
func TestRemediesAreFatalAcceleratorReasons(t *testing.T) {
	for r := range catalogueRemedies {
		reason, ok := LookupReason(r)
		if !ok || reason.Condition != AcceleratedHardwareReady || reason.Severity != Fatal {
			t.Errorf("%s: %+v (known %v), want a Fatal AcceleratedHardwareReady reason", r, reason, ok)
		}
	}
}
