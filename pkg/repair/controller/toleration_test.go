package controller_test

import (
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/health"
)

// A node whose KernelReady has been False for less than 30 minutes is left
// alone; at exactly 30 minutes it is tainted, drained and replaced.
func TestTolerationNotYetReachedThenExactlyAtExpiry(t *testing.T) {
	h := start(t)
	h.node("tol-1")
	h.node("tol-2")
	h.node("tol-3")
	h.node("tol-4")
	h.node("tol-5")
	start := h.t0.Add(-10 * time.Minute)
	h.fault("tol-1", "KernelReady", "False", "KernelDeadlock", start)
	h.waitRecorded("tol-1")

	h.advanceTo(start.Add(30*time.Minute - time.Second))
	h.consistently("tol-1 untouched one second before expiry", func() bool { return h.untouched("tol-1") })

	h.advanceTo(start.Add(30 * time.Minute))
	h.eventually("tol-1 repaired at expiry", func() bool { return h.gone("tol-1") })
	h.waitEvent("tol-1", "NodeRepairStarted", "KernelReady=False/KernelDeadlock since")
	h.waitEvent("tol-1", "NodeRepairHandedOver", "node backend")
	h.waitEvent("tol-1", "NodeRepairSucceeded", "KernelReady")
	for _, other := range []string{"tol-2", "tol-3", "tol-4", "tol-5"} {
		if !h.untouched(other) || h.since(other) != "" {
			t.Errorf("%s was touched", other)
		}
	}
}

// The accelerator rule tolerates 10 minutes, not 30.
func TestAcceleratedHardwareToleratesTenMinutes(t *testing.T) {
	h := start(t)
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"} {
		h.node(n)
	}
	h.fault("gpu-1", "AcceleratedHardwareReady", "False", health.ReasonNvidiaXID79Error, h.t0)
	h.waitRecorded("gpu-1")
	h.advanceTo(h.t0.Add(10*time.Minute - time.Second))
	h.consistently("gpu-1 untouched", func() bool { return h.untouched("gpu-1") })
	h.advanceTo(h.t0.Add(10 * time.Minute))
	h.eventually("gpu-1 repaired", func() bool { return h.gone("gpu-1") })
}

// A condition that recovers inside the window resets everything: the node
// is never tainted, the record is cleared, and a new fault starts a new
// clock.
func TestRecoveryInsideTheWindow(t *testing.T) {
	h := start(t)
	for _, n := range []string{"rec-1", "rec-2", "rec-3", "rec-4", "rec-5"} {
		h.node(n)
	}
	h.fault("rec-1", "ContainerRuntimeReady", "False", "ContainerRuntimeUnresponsive", h.t0)
	h.waitRecorded("rec-1")
	h.advance(20 * time.Minute)
	h.heal("rec-1", "ContainerRuntimeReady")
	h.eventually("record cleared", func() bool { return h.since("rec-1") == "" })
	h.waitEvent("rec-1", "NodeRecovered", "repair clock reset")

	h.advanceTo(h.t0.Add(31 * time.Minute))
	h.consistently("rec-1 never touched", func() bool { return h.untouched("rec-1") })

	// A new fault: 30 minutes from its own start, not from the old one.
	second := h.clock.Now()
	h.fault("rec-1", "ContainerRuntimeReady", "False", "ContainerRuntimeUnresponsive", second)
	h.waitRecorded("rec-1")
	h.advanceTo(second.Add(30*time.Minute - time.Second))
	h.consistently("rec-1 untouched inside the new window", func() bool { return h.untouched("rec-1") })
	h.advanceTo(second.Add(30 * time.Minute))
	h.eventually("rec-1 repaired at the new expiry", func() bool { return h.gone("rec-1") })
}

// An agent that keeps moving LastTransitionTime forward while the condition
// stays False cannot postpone the repair: the controller's own record of
// when it first saw the fault counts.
func TestLastTransitionTimePushedForwardRepeatedly(t *testing.T) {
	h := start(t)
	for _, n := range []string{"ltt-1", "ltt-2", "ltt-3", "ltt-4", "ltt-5"} {
		h.node(n)
	}
	h.fault("ltt-1", "NetworkingReady", "False", "InterfaceNotUp", h.t0)
	h.waitRecorded("ltt-1")
	for i := 1; i <= 5; i++ {
		h.advanceTo(h.t0.Add(time.Duration(i) * 5 * time.Minute))
		h.fault("ltt-1", "NetworkingReady", "False", "InterfaceNotUp", h.clock.Now())
		h.consistently("ltt-1 untouched before 30m", func() bool { return h.untouched("ltt-1") })
	}
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.eventually("ltt-1 repaired 30m after it was first seen", func() bool { return h.gone("ltt-1") })
}

// Ready=Unknown (the kubelet stopped reporting) is repaired like False.
func TestReadyUnknown(t *testing.T) {
	h := start(t)
	for _, n := range []string{"rdy-1", "rdy-2", "rdy-3", "rdy-4", "rdy-5"} {
		h.node(n)
	}
	h.fault("rdy-1", "Ready", "False", "KubeletNotReady", h.t0)
	h.waitRecorded("rdy-1")
	h.advance(10 * time.Minute)
	// The node lifecycle controller marks it Unknown later: same fault,
	// same clock.
	h.fault("rdy-1", "Ready", "Unknown", "NodeStatusUnknown", h.clock.Now())
	h.advanceTo(h.t0.Add(30 * time.Minute))
	h.eventually("rdy-1 repaired 30m after Ready went False", func() bool { return h.gone("rdy-1") })
}

// The kubelet's pressure conditions never trigger a repair, however long.
func TestPressureConditionsIgnored(t *testing.T) {
	h := start(t)
	h.node("press-1")
	h.node("press-2")
	h.fault("press-1", "DiskPressure", "True", "KubeletHasDiskPressure", h.t0)
	h.fault("press-1", "MemoryPressure", "True", "KubeletHasInsufficientMemory", h.t0)
	h.fault("press-2", "PIDPressure", "True", "KubeletHasInsufficientPID", h.t0)
	h.advance(48 * time.Hour)
	h.consistently("pressure is not a fault", func() bool {
		return h.untouched("press-1") && h.untouched("press-2") && h.since("press-1") == "" && h.since("press-2") == ""
	})
}
