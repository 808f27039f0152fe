package controller_test

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/repair/history"
)

// Every step of a repair is an Event with its typed record: what kubectl
// mend timeline reads once the node is gone (docs/repair-history.md).
func TestRepairEventsCarryTheirRecords(t *testing.T) {
	h := start(t)
	for _, n := range []string{"rec-ev-1", "rec-ev-2", "rec-ev-3", "rec-ev-4", "rec-ev-5"} {
		h.node(n)
	}
	since := h.t0.Add(-30 * time.Minute)
	h.fault("rec-ev-1", "KernelReady", "False", "KernelDeadlock", since)
	h.waitRecorded("rec-ev-1")
	h.advanceTo(since.Add(30 * time.Minute))
	h.eventually("rec-ev-1 repaired", func() bool { return h.gone("rec-ev-1") })

	record := func(reason string) history.Record {
		t.Helper()
		e := h.waitEvent("rec-ev-1", reason, "")
		r, ok := history.Read(e.Annotations)
		if !ok {
			t.Fatalf("%s has no repair record: %v", reason, e.Annotations)
		}
		if e.ReportingController != "nodemend-repair" || e.Action == "" {
			t.Errorf("%s: reporter %q action %q", reason, e.ReportingController, e.Action)
		}
		return r
	}
	st := record(history.Started)
	if st.Trigger == nil || st.Trigger.String() != "KernelReady=False/KernelDeadlock" || !st.UnhealthySince.Equal(since) ||
		st.Toleration.Duration != 30*time.Minute || st.Policy != "default" || st.Pool == nil || st.Pool.Kind != "Cluster" ||
		st.Drain == nil || st.Drain.Mode != "Evict" {
		t.Errorf("NodeRepairStarted record: %+v", st)
	}
	ho := record(history.HandedOver)
	if ho.Target == nil || ho.Target.Kind != "Node" || ho.Target.Name != "rec-ev-1" || ho.Target.Backend != "node" {
		t.Errorf("NodeRepairHandedOver record: %+v", ho)
	}
	if td := record(history.TargetDeleted); td.Target == nil || td.Target.Name != "rec-ev-1" {
		t.Errorf("NodeRepairTargetDeleted record: %+v", td)
	}
	if s := record(history.Succeeded); s.Trigger == nil || s.Trigger.Type != "KernelReady" || s.Took.Duration < 30*time.Minute {
		t.Errorf("NodeRepairSucceeded record: %+v", s)
	}
}
