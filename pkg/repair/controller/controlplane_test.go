package controller_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controlplane"
)

// etcdPod creates node's etcd static pod as its kubelet mirrors it into
// kube-system, Ready or not (its kubelet's probe of etcd's health endpoint).
func (h *harness) etcdPod(node string, ready bool) *corev1Pod {
	h.t.Helper()
	p := must[*corev1Pod](h.t)(repairtest.Pod(h.ctx, k8s, metav1.NamespaceSystem, "etcd-"+node, node, repairtest.Mirror(), repairtest.PodLabels(controlplane.ComponentLabel, "etcd")))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, p, client.GracePeriodSeconds(0)) })
	if !ready {
		h.setPodReady(p, false)
	}
	return p
}

func (h *harness) setPodReady(p *corev1Pod, ready bool) {
	h.t.Helper()
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
}

var controlPlaneLabel = repairtest.Labels(controlplane.RoleLabel, "")

// By default a control-plane node is not repaired — known by its role
// label, or by the etcd static pod it runs — and an event says why.
func TestControlPlaneNodesAreSkippedByDefault(t *testing.T) {
	h := start(t)
	h.node("cp-label", controlPlaneLabel)
	h.node("cp-etcd")
	h.etcdPod("cp-etcd", true)
	for i := range 8 {
		h.node(fmt.Sprintf("w-%d", i))
	}
	h.advanceTo(h.expire("cp-label"))
	h.waitEvent("cp-label", "NodeRepairBlocked", "cp-label is a control-plane node (the control-plane role label): control-plane nodes are not repaired unless the node's NodeRepairPolicy opts them in (spec.controlPlane: Repair")
	h.recover("cp-label", "KernelReady")
	h.fault("cp-etcd", "KernelReady", "False", "KernelDeadlock", h.clock.Now())
	h.waitRecorded("cp-etcd")
	h.advance(30 * time.Minute)
	h.waitEvent("cp-etcd", "NodeRepairBlocked", "cp-etcd is a control-plane node (an etcd member (static pod))")
	h.advance(10 * time.Minute)
	h.consistently("control-plane nodes untouched", func() bool { return h.untouched("cp-label") && h.untouched("cp-etcd") })
	// A worker is repaired as before.
	h.fault("w-0", "KernelReady", "False", "KernelDeadlock", h.clock.Now())
	h.waitRecorded("w-0")
	h.advance(30 * time.Minute)
	h.eventually("the worker repaired", func() bool { return h.gone("w-0") })
}

// optInControlPlanes is a policy that repairs the labelled control-plane
// nodes, with no pool limit of its own to get in the way.
func (h *harness) optInControlPlanes() {
	h.policy("control-plane", v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: controlplane.RoleLabel, Operator: metav1.LabelSelectorOpExists}}},
		MaxUnhealthy: ptr(intstr.FromString("100%")), Action: v1alpha1.ActionReplace, ControlPlane: v1alpha1.ControlPlaneRepair,
	})
}

// Opted in, an etcd member's node is repaired only while the other members
// keep quorum, judged by their health as the cluster reports it.
func TestControlPlaneOptedInOnlyWithQuorum(t *testing.T) {
	h := start(t)
	h.optInControlPlanes()
	var etcd []*corev1Pod
	for i := range 3 {
		name := fmt.Sprintf("cp-%d", i)
		h.node(name, controlPlaneLabel)
		etcd = append(etcd, h.etcdPod(name, i != 2)) // cp-2's member is not healthy
	}
	// cp-0 due: without it, only cp-1 of the 3 members is healthy.
	h.advanceTo(h.expire("cp-0"))
	h.waitEvent("cp-0", "NodeRepairBlocked", "etcd would lose quorum: without cp-0, 1 of the 3 etcd members are healthy, 2 needed for quorum (not healthy: cp-2)")
	h.consistently("cp-0 kept while etcd needs it", func() bool { return h.untouched("cp-0") })
	// cp-2's member recovers: at the recheck cp-0 is repaired.
	h.setPodReady(etcd[2], true)
	h.advance(5 * time.Minute)
	h.eventually("cp-0 repaired once quorum holds without it", func() bool { return h.gone("cp-0") })
}

// Opted in, control-plane nodes are repaired one at a time cluster-wide,
// even when they are due at the same moment.
func TestControlPlaneOptedInOneAtATime(t *testing.T) {
	h := start(t)
	h.optInControlPlanes()
	var etcd []*corev1Pod
	for i := range 3 {
		name := fmt.Sprintf("cp-%d", i)
		h.node(name, controlPlaneLabel)
		etcd = append(etcd, h.etcdPod(name, true))
	}
	h.advanceTo(h.expire("cp-0", "cp-1"))
	h.eventually("one control-plane node under repair", func() bool { return !h.untouched("cp-0") || !h.untouched("cp-1") })
	first, second := "cp-0", "cp-1"
	if h.untouched(first) {
		first, second = second, first
	}
	h.waitEvent(second, "NodeRepairBlocked", first+" is under repair, and control-plane nodes are repaired one at a time")
	h.consistently("one at a time", func() bool { return h.untouched(second) })
	// The first is replaced, and its etcd member goes with it. The second
	// would now leave 1 of 2 members: no quorum, so it waits.
	h.eventually(first+" repaired", func() bool { return h.gone(first) })
	for _, p := range etcd {
		if p.Spec.NodeName == first {
			if err := k8s.Delete(h.ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.advance(5 * time.Minute)
	h.consistently("quorum kept: the second waits", func() bool { return h.untouched(second) })
}

// Opted in, the last Ready control-plane node is not repaired.
func TestControlPlaneLastReadyIsKept(t *testing.T) {
	h := start(t)
	h.optInControlPlanes()
	h.node("cp-a", controlPlaneLabel)
	h.node("cp-b", controlPlaneLabel)
	// cp-b goes NotReady a minute before cp-a is due, so that cp-b is not
	// due itself then: were it repaired first, cp-a would wait for it ("one
	// at a time") and not as the last Ready one. Its fault is written when
	// the clock is there, not dated ahead: a transition time in the future
	// counts from now (unhealthy.Assess), which made cp-b due with cp-a.
	due := h.expire("cp-a")
	h.advanceTo(due.Add(-time.Minute))
	h.fault("cp-b", corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", h.clock.Now())
	h.waitRecorded("cp-b")
	h.advanceTo(due)
	h.waitEvent("cp-a", "NodeRepairBlocked", "cp-a is a control-plane node (the control-plane role label): it is the last Ready control-plane node")
	h.consistently("the last Ready one kept", func() bool { return h.untouched("cp-a") })
}
