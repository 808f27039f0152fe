package kernel

import (
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/pkg/health"
)

// TestOtherCloudsEventsAreWarnings: Azure's scheduled events (as its
// Scheduled Events documentation shows them) and GCE's maintenance and
// preemption notices become the same Warnings as AWS's: a Freeze or a
// Reboot is ScheduledMaintenance (one per event ID), a Preempt or a
// preemption SpotInterruption; none is Fatal.
func TestOtherCloudsEventsAreWarnings(t *testing.T) {
	now := time.Date(2022, 4, 11, 22, 0, 0, 0, time.UTC)
	azure, err := cloudmeta.ParseAzureScheduledEvents([]byte(`{"DocumentIncarnation": 3, "Events": [
	  {"EventId": "f020ba2e-3bc0-4c40-a10b-86575a9eabd5", "EventType": "Freeze", "ResourceType": "VirtualMachine",
	   "Resources": ["examplevmname"], "EventStatus": "Scheduled", "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
	   "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
	   "EventSource": "Platform", "DurationInSeconds": 5},
	  {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventType": "Reboot", "ResourceType": "VirtualMachine",
	   "Resources": ["examplevmname"], "EventStatus": "Scheduled", "NotBefore": "Mon, 11 Apr 2022 22:40:00 GMT",
	   "Description": "Virtual machine is going to be restarted as requested by authorized user.", "EventSource": "User",
	   "DurationInSeconds": -1},
	  {"EventId": "A5F13A16-AFDC-4513-B24B-C7061BAC1234", "EventType": "Preempt", "ResourceType": "VirtualMachine",
	   "Resources": ["examplevmname"], "EventStatus": "Scheduled", "NotBefore": "Mon, 11 Apr 2022 22:00:30 GMT",
	   "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}]}`), "examplevmname")
	if err != nil {
		t.Fatal(err)
	}
	gceMaint, ok := cloudmeta.ParseGCEMaintenance([]byte("MIGRATE_ON_HOST_MAINTENANCE"))
	if !ok {
		t.Fatal("GCE maintenance not read")
	}
	fs := CloudEventFindings(append(azure, gceMaint), now)
	want := []struct{ reason, subject, text string }{
		{health.ReasonScheduledMaintenance, "f020ba2e-3bc0-4c40-a10b-86575a9eabd5", "freeze"},
		{health.ReasonScheduledMaintenance, "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "reboot"},
		{health.ReasonSpotInterruption, "spot", "evicted at 2022-04-11T22:00:30Z (in 30s)"},
		{health.ReasonScheduledMaintenance, "migrate-on-host-maintenance", "migrate-on-host-maintenance"},
	}
	if len(fs) != len(want) {
		t.Fatalf("findings %+v", fs)
	}
	for i, w := range want {
		if fs[i].Reason != w.reason || fs[i].Subject != w.subject || !strings.Contains(fs[i].Message, w.text) {
			t.Errorf("finding %d: %s %q %q; want %s %q containing %q", i, fs[i].Reason, fs[i].Subject, fs[i].Message, w.reason, w.subject, w.text)
		}
		if reg, _ := health.LookupReason(fs[i].Reason); reg.Severity != health.Warning {
			t.Errorf("%s is %s, never Fatal", fs[i].Reason, reg.Severity)
		}
	}
}
