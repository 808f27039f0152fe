package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/controller"
)

const agentConfigMap = "nodemend-agent-config"

func withAgentConfig(o *controller.Options) { o.AgentConfig = agentConfigMap }

// runWith starts the controller of h and keeps its reconciler.
func (h *harness) runWith() *controller.Reconciler {
	h.t.Helper()
	m := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(h.t, testr.Options{Verbosity: 0})})
	h.reg, h.stop = m.reg, m.stop
	return m.rec
}

// setAgentConfig writes the agents' ConfigMap with file as their config.
func (h *harness) setAgentConfig(file string) {
	h.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: agentConfigMap}}
	err := k8s.Get(h.ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{"agent.yaml": file}
	switch {
	case err == nil:
		err = k8s.Update(h.ctx, cm)
	case client.IgnoreNotFound(err) == nil:
		err = k8s.Create(h.ctx, cm)
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

// quietPolicy tolerates any fault of condition for toleration on the nodes
// labelled quiet=name, every one of them at once.
func (h *harness) quietPolicy(name string, condition corev1.NodeConditionType, toleration time.Duration) {
	h.t.Helper()
	all := intstr.FromString("100%")
	h.policy(name, v1alpha1.NodeRepairPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"quiet": name}},
		Weight:       100, MaxUnhealthy: &all,
		Rules: []v1alpha1.RepairRule{{ConditionType: string(condition), Status: "False", Toleration: metav1.Duration{Duration: toleration}}},
	})
}

// An agents' override that shortens a family's quiet period below a
// policy's toleration refuses the policy, naming the override and where it
// was set; the ConfigMap is watched: its change alone re-judges the policy
// (the node waits for its toleration on the fake clock, nothing else wakes
// it), and removing the override brings the policy back without a
// restart: the node is repaired at the policy's 20 minutes, not at the
// defaults' 10.
func TestAgentsOverrideRefusesAPolicyUntilRemoved(t *testing.T) {
	h := newHarness(t, withAgentConfig)
	h.setAgentConfig("reasons: {}\n")
	rec := h.runWith()
	h.quietPolicy("quiet-gpu", "AcceleratedHardwareReady", 20*time.Minute)
	h.node("qp-1", repairtest.Labels("quiet", "quiet-gpu"))
	h.fault("qp-1", "AcceleratedHardwareReady", "False", health.ReasonNvidiaXID79Error, h.t0)
	h.waitRecorded("qp-1")

	h.setAgentConfig("reasons:\n  NvidiaXIDError:\n    quietPeriod: 15m\n")
	h.waitEvent("quiet-gpu", "NodeRepairPolicyInvalid", "policy ignored: rule on AcceleratedHardwareReady=False: toleration 20m0s is not shorter than "+
		"the quiet period 15m0s the agents' configuration (reasons.NvidiaXIDError.quietPeriod in ConfigMap "+h.ns+"/"+agentConfigMap+") gives it of NvidiaXID")

	h.setAgentConfig("reasons: {}\n")
	h.eventually("quiet-gpu accepted again", func() bool {
		problems, err := rec.PolicyProblems(h.ctx)
		return err == nil && len(problems) == 0
	})
	h.advanceTo(h.t0.Add(20 * time.Minute))
	h.waitEvent("qp-1", "NodeRepairStarted", "toleration 20m0s, policy quiet-gpu")
}

// Without --agent-config the controller says on the policy why it does not
// know the agents' quiet periods, and the policy still acts.
func TestUnnamedAgentConfigWarnsAndThePolicyActs(t *testing.T) {
	h := newHarness(t)
	h.runWith()
	h.quietPolicy("quiet-unnamed", "KernelReady", 20*time.Minute)
	h.node("qu-1", repairtest.Labels("quiet", "quiet-unnamed"))
	h.fault("qu-1", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.waitEvent("quiet-unnamed", "NodeRepairPolicyInvalid", "the controller does not know it (no agents' ConfigMap is named (--agent-config is empty)")
	h.waitRecorded("qu-1")
	h.advanceTo(h.t0.Add(20 * time.Minute))
	h.waitEvent("qu-1", "NodeRepairStarted", "toleration 20m0s, policy quiet-unnamed")
	// Once per policy and state: the node's many reconciles since wrote
	// no more.
	h.waitEvent("qu-1", "NodeRepairSucceeded", "")
	if evs := h.events("quiet-unnamed", "NodeRepairPolicyInvalid"); len(evs) != 1 {
		t.Errorf("%d NodeRepairPolicyInvalid events on quiet-unnamed, want 1", len(evs))
	}
}

// A named ConfigMap that is missing, or that holds what no agent accepts,
// leaves the quiet periods unknown: said on the policy, which still acts.
func TestMissingOrInvalidAgentConfigWarns(t *testing.T) {
	h := newHarness(t, withAgentConfig)
	h.runWith()
	h.quietPolicy("quiet-missing", "KernelReady", 20*time.Minute)
	h.node("qm-1", repairtest.Labels("quiet", "quiet-missing"))
	h.fault("qm-1", "KernelReady", "False", "KernelDeadlock", h.t0)
	h.waitEvent("quiet-missing", "NodeRepairPolicyInvalid", "ConfigMap "+h.ns+"/"+agentConfigMap+" not found")
	h.waitRecorded("qm-1")

	h.setAgentConfig("reasons:\n  NvidiaXIDError:\n    quietPeriod: soon\n")
	h.waitEvent("quiet-missing", "NodeRepairPolicyInvalid", "agent.yaml is not a config the agents accept")
	h.advanceTo(h.t0.Add(20 * time.Minute))
	h.waitEvent("qm-1", "NodeRepairStarted", "toleration 20m0s, policy quiet-missing")
}

// A ConfigMap the controller may not list (its RBAC does not name it) does
// not hold the controller's start: the quiet periods are unknown, and the
// reason says so.
func TestUnreadableAgentConfigIsUnknown(t *testing.T) {
	h := newHarness(t)
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	agents, err := controller.ReadAgentQuietPeriods(h.ctx, kubernetes.NewForConfigOrDie(cfg), h.ns, agentConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	want := "ConfigMap " + h.ns + "/" + agentConfigMap + " cannot be read: "
	if agents.Known || !strings.Contains(agents.Unknown, want) || !strings.Contains(agents.Unknown, "forbidden") {
		t.Errorf("%+v, want unknown saying %q ... forbidden", agents, want)
	}
}
