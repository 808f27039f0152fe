//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/sim"
	"nodemend.dev/nodemend/sim/simgpu"
)

// xid119 is a GSP timeout on the simulated GPU 0: the NVIDIA catalogue
// resolves it with a GPU reset, so the default ladder of a node no engine
// owns starts with ResetAccelerator.
const xid119 = "NVRM: Xid (PCI:0000:3b:00): 119, pid=4242, name=trainer, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."

// gpuFault puts GPU 0 of host in the state XID 119 leaves it (every query
// answers "[GPU requires reset]") and logs the XID.
func gpuFault(t *testing.T, host *sim.Host) {
	t.Helper()
	if err := simgpu.RequireReset(host.Root, simgpu.BusID(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Kmsg(xid119); err != nil {
		t.Fatal(err)
	}
}

// A GPU node no engine owns, with a fault a reset resolves, is tainted,
// drained, and its GPU reset by its agent with the host's nvidia-smi: it
// answers healthy and the node returns to service without a reboot.
func TestResetRungRepairsAGPUWithoutAReboot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "e2e-gpu-reset"
	host, boot := plainNode(ctx, t, node, "e2e-gpu-reset", gpuCondition, map[string]string{sim.GPULabel: "1"}, "")
	tainted := watchTaint(ctx, t, node)
	t0 := time.Now()
	gpuFault(t, host)
	back := waitNode(ctx, t, node, "tainted, reset, and back in service: untainted, schedulable, AcceleratedHardwareReady", func(n *corev1.Node) bool {
		_, seen := tainted()
		return seen && !hasTaint(n, "nodemend.dev/repair") && !n.Spec.Unschedulable && conditionIs(n, string(gpuCondition), corev1.ConditionTrue)
	})
	taintedAt, _ := tainted()
	resets, err := simgpu.Resets(host.Root)
	if err != nil {
		t.Fatal(err)
	}
	if len(resets) != 1 || strings.Join(resets[0], ",") != simgpu.BusID(0) {
		t.Errorf("GPU resets %v, want one of %s", resets, simgpu.BusID(0))
	}
	if host.Reboots() != 0 || back.Status.NodeInfo.BootID != boot {
		t.Errorf("rebooted %d times (boot %s, was %s), want no reboot", host.Reboots(), back.Status.NodeInfo.BootID, boot)
	}
	if orders := ordersFor(ctx, t, node); orders != "ResetAccelerator" {
		t.Errorf("orders for the node: %q, want exactly one ResetAccelerator", orders)
	}
	for _, reason := range []string{"NodeRemediationOrdered", "NodeReturnedToService"} {
		if got := eventCount(ctx, t, node, reason, 1); got != 1 {
			t.Errorf("%d %s events, want 1", got, reason)
		}
	}
	for _, reason := range []string{"NodeRepairFailed", "NodeRemediationFailed"} {
		if got := eventCount(ctx, t, node, reason, 0); got != 0 {
			t.Errorf("%d %s events, want none", got, reason)
		}
	}
	timelineShows(ctx, t, node, "ResetAccelerator (rung 1 of 3, attempt 1 of 1)", "accelerators reset and healthy", "NodeReturnedToService")
	t.Logf("FIGURE reset rung: fault → taint %s, → back in service %s",
		taintedAt.Sub(t0).Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
}

// With a process on the faulted GPU the agent refuses the reset (nodemend
// never kills a workload's process): the ladder escalates to Reboot, which
// clears the GPU, and the node returns to service.
func TestBusyGPUEscalatesToReboot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "e2e-gpu-busy"
	host, boot := plainNode(ctx, t, node, "e2e-gpu-busy", gpuCondition, map[string]string{sim.GPULabel: "1"}, "")
	if err := simgpu.SetBusy(host.Root, simgpu.BusID(0), 4242, "trainer"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	gpuFault(t, host)
	waitReboot(ctx, t, host)
	rebooted := time.Since(t0)
	back := waitNode(ctx, t, node, "back in service: untainted, schedulable, AcceleratedHardwareReady", func(n *corev1.Node) bool {
		return !hasTaint(n, "nodemend.dev/repair") && !n.Spec.Unschedulable && conditionIs(n, string(gpuCondition), corev1.ConditionTrue)
	})
	if resets, _ := simgpu.Resets(host.Root); len(resets) != 0 {
		t.Errorf("GPU resets %v with a process on the GPU, want none", resets)
	}
	if host.Reboots() != 1 || back.Status.NodeInfo.BootID == boot {
		t.Errorf("rebooted %d times (boot %s, was %s), want once", host.Reboots(), back.Status.NodeInfo.BootID, boot)
	}
	if orders := strings.Split(ordersFor(ctx, t, node), ","); !slices.Equal(slices.Sorted(slices.Values(orders)), []string{"Reboot", "ResetAccelerator"}) {
		t.Errorf("orders for the node: %q, want a ResetAccelerator and a Reboot", orders)
	}
	failed, _ := events(ctx, t, node, "NodeRemediationFailed")
	if len(failed) == 0 || !strings.Contains(failed[0].Message, "accelerator in use") || !strings.Contains(failed[0].Message, "4242 trainer") {
		t.Errorf("NodeRemediationFailed events %v, want one saying the GPU is in use by 4242 trainer", failed)
	}
	for _, reason := range []string{"NodeRebootVerified", "NodeReturnedToService"} {
		if got := eventCount(ctx, t, node, reason, 1); got != 1 {
			t.Errorf("%d %s events, want 1", got, reason)
		}
	}
	timelineShows(ctx, t, node, "ResetAccelerator (rung 1 of 3, attempt 1 of 1)", "accelerator in use", "Reboot (rung 2 of 3, attempt 1 of 1)", "NodeReturnedToService")
	t.Logf("FIGURE busy GPU: fault → rebooted %s, → back in service %s",
		rebooted.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
}
