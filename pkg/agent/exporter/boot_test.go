package exporter

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/health"
)

// A log-derived fault written during an earlier boot is dropped by the
// agent of the next boot (a reboot is how it is repaired); a polled fault
// stays until its check runs. Within one boot a restart keeps both
// (TestRestartKeepsActiveFaultAndTransitionTime).
func TestFaultsOfAnEarlierBootAreDropped(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	node := newNode(t)
	h := startExporter(t, node, clk, "kernel", "containerRuntime")
	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, "fork failed", clk.Now()))
	stuck := detectionOf(t, health.ReasonPodStuckTerminating, "pod default/web-0 is stuck", clk.Now())
	stuck.Finding.Subject = "default/web-0"
	h.exp.ReportCheck([]string{health.ReasonPodStuckTerminating}, []Detection{stuck})
	h.eventually("both False", func(n *corev1.Node) bool {
		return hasStatus(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs)(n) &&
			hasStatus(health.ContainerRuntimeReady, corev1.ConditionFalse, health.ReasonPodStuckTerminating)(n)
	})
	h.stop()

	clk.Step(5 * time.Minute)
	e := New(Options{Client: exporterClient, NodeName: node, Clock: clk, Log: testr.New(t), EarlierBoot: true})
	k, _ := health.LookupMonitor("kernel")
	r, _ := health.LookupMonitor("containerRuntime")
	e.SetMonitors([]health.Monitor{k, r})
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h2 := &harness{t: t, node: node, clock: clk, exp: e, stop: func() {}}
	h2.eventually("KernelReady True at once, ContainerRuntimeReady still False", func(n *corev1.Node) bool {
		return hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady)(n) &&
			hasStatus(health.ContainerRuntimeReady, corev1.ConditionFalse, health.ReasonPodStuckTerminating)(n)
	})
}

// A monitor switched off and on again does not bring back the faults it had
// before: they were dropped with it.
func TestMonitorReenabledDoesNotBringBackStaleFaults(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := startExporter(t, newNode(t), clk, "kernel", "containerRuntime")
	h.exp.Report(detectionOf(t, health.ReasonForkFailedOutOfPIDs, "fork failed", clk.Now()))
	h.eventually("KernelReady False", hasStatus(health.KernelReady, corev1.ConditionFalse, health.ReasonForkFailedOutOfPIDs))
	k, _ := health.LookupMonitor("kernel")
	r, _ := health.LookupMonitor("containerRuntime")
	h.exp.SetMonitors([]health.Monitor{r})
	h.eventually("KernelReady gone", func(n *corev1.Node) bool { return cond(n, health.KernelReady) == nil })
	h.exp.SetMonitors([]health.Monitor{k, r})
	h.eventually("KernelReady back, True", hasStatus(health.KernelReady, corev1.ConditionTrue, health.HealthyKernelIsReady))
}

// After a reset of GPU 0000:3b:00.0 that answers healthy, its reset-class
// XID is cleared; another GPU's fault and a fault a reset does not resolve
// (XID 79) stay.
func TestClearAfterReset(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := startExporter(t, newNode(t), clk, "nvidia")
	xid := func(reason, subject string) Detection {
		d := detectionOf(t, reason, "Xid on "+subject, clk.Now())
		d.Finding.Subject = subject
		return d
	}
	h.exp.Report(xid(health.ReasonNvidiaXID48Error, "0000:3b:00"))
	clk.Step(time.Second)
	h.exp.Report(xid(health.ReasonNvidiaXID48Error, "0000:5d:00"))
	clk.Step(time.Second)
	h.exp.Report(xid(health.ReasonNvidiaXID79Error, "0000:86:00"))
	if got := resetCandidates(h.exp); !slices.Equal(got, []string{"0000:3b:00", "0000:5d:00"}) {
		t.Errorf("ResetCandidates = %v", got)
	}
	clearAfterReset(h.exp, []string{"0000:3b:00.0"}, false)
	if got := resetCandidates(h.exp); !slices.Equal(got, []string{"0000:5d:00"}) {
		t.Errorf("after the reset of 3b: %v", got)
	}
	clearAfterReset(h.exp, []string{"0000:5d:00.0", "0000:86:00.0"}, false)
	h.eventually("XID 79 remains", hasStatus(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonNvidiaXID79Error))
}

// Of two faults on one condition, the one whose remedy is heavier names the
// condition, whatever their order: the controller starts its ladder from
// the condition's reason. A double-bit error (a GPU reset activates the
// remapped row) followed by XID 64 (the remap failed: new hardware) is a
// hardware fault. The reset candidates are PCI addresses only: a DCGM
// finding names a DCGM entity, which no reset tool takes, and is cleared
// when every GPU was reset.
func TestHeaviestRemedyNamesTheCondition(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := startExporter(t, newNode(t), clk, "nvidia")
	on := func(reason, subject string) Detection {
		d := detectionOf(t, reason, reason+" on "+subject, clk.Now())
		d.Finding.Subject = subject
		return d
	}
	h.exp.Report(on(health.ReasonNvidiaXID48Error, "0000:3b:00"))
	h.eventually("XID 48 names the condition", hasStatus(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonNvidiaXID48Error))
	clk.Step(time.Second)
	h.exp.Report(on(health.ReasonNvidiaXID64Error, "0000:3b:00"))
	h.eventually("XID 64, the heavier remedy, names it", hasStatus(health.AcceleratedHardwareReady, corev1.ConditionFalse, health.ReasonNvidiaXID64Error))

	dcgm := on(health.ReasonDCGMHealthCode125, "GPU 0")
	h.exp.ReportCheck([]string{health.ReasonDCGMHealthCode125}, []Detection{dcgm})
	if got := resetCandidates(h.exp); !slices.Equal(got, []string{"0000:3b:00"}) {
		t.Errorf("ResetCandidates = %v, want the PCI address only", got)
	}
	clearAfterReset(h.exp, []string{"0000:3b:00.0"}, false)
	if got := resetCandidates(h.exp); len(got) != 0 {
		t.Errorf("after the reset of 3b: %v", got)
	}
	h.eventually("the DCGM fault stays after one GPU's reset", func(n *corev1.Node) bool {
		c := cond(n, health.AcceleratedHardwareReady)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == health.ReasonNvidiaXID64Error && strings.Contains(c.Message, health.ReasonDCGMHealthCode125)
	})
	clearAfterReset(h.exp, nil, true)
	h.eventually("XID 64 alone after every GPU's reset", func(n *corev1.Node) bool {
		c := cond(n, health.AcceleratedHardwareReady)
		return c != nil && c.Reason == health.ReasonNvidiaXID64Error && !strings.Contains(c.Message, "more active")
	})
}

// resetCandidates and clearAfterReset read and clear the faults as the
// agent wires them to a GPU reset (pkg/agent/remediate).
func resetCandidates(e *Exporter) []string {
	return e.FaultSubjects(health.AcceleratedHardwareReady, remediate.ResetCandidate)
}

func clearAfterReset(e *Exporter, devices []string, everyGPU bool) {
	e.ClearFaults(health.AcceleratedHardwareReady, remediate.ClearedByReset(devices, everyGPU))
}
