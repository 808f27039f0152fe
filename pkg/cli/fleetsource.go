package cli

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// fleetState is one consistent look at everything the repair decisions
// depend on: one list per kind, nothing per node.
type fleetState struct {
	nodes       []*corev1.Node
	policies    *policy.Set
	problems    []policy.Problem
	paused      bool
	pauseReason string
	machines    pool.MachineLookup
	// warnings are things that could not be read and what that means.
	warnings []string
}

func (f *fleetState) input(flags controllerFlags, now time.Time) fleet.Input {
	return fleet.Input{Nodes: f.nodes, Policies: f.policies, Paused: f.paused, PauseReason: f.pauseReason,
		Pools: backends.Pools(flags.poolLabel), Machines: f.machines, Now: now}
}

// loadFleet lists every node (the gate counts whole pools, whatever -l
// selects), the NodeRepairPolicies, Cluster API Machines when installed,
// and reads the pause switch.
func loadFleet(ctx context.Context, c *Clients, flags controllerFlags) (*fleetState, error) {
	nodes, err := c.Bulk.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, Explain(err, "listing nodes")
	}
	f := &fleetState{nodes: make([]*corev1.Node, len(nodes.Items))}
	for i := range nodes.Items {
		f.nodes[i] = &nodes.Items[i]
	}
	pols, err := c.Dynamic.Resource(nodeRepairPolicyGVR).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		f.warnings = append(f.warnings, "NodeRepairPolicy CRD not installed: the built-in default policy applies to every node")
		pols = &unstructured.UnstructuredList{}
	case err != nil:
		return nil, Explain(err, "listing noderepairpolicies.nodemend.dev")
	}
	agents, warning := readAgentQuietPeriods(ctx, c, flags)
	if warning != "" {
		f.warnings = append(f.warnings, warning)
	}
	f.policies, f.problems, err = compilePolicies(pols.Items, agents)
	if err != nil {
		return nil, err
	}
	for _, p := range f.problems {
		if p.Err != nil {
			f.warnings = append(f.warnings, fmt.Sprintf("NodeRepairPolicy %s is ignored by the controller: %v", p.Policy, p.Err))
		}
	}
	f.paused, f.pauseReason, err = readPause(ctx, c, flags)
	if err != nil {
		f.warnings = append(f.warnings, err.Error())
	}
	if gvr, ok := machineGVR(c.Core.Discovery()); ok {
		ms, err := c.Metadata.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, Explain(err, "listing Cluster API machines")
		}
		f.machines = machineIndex(ms.Items)
	}
	return f, nil
}

func compilePolicies(items []unstructured.Unstructured, agents policy.AgentQuietPeriods) (*policy.Set, []policy.Problem, error) {
	typed := make([]v1alpha1.NodeRepairPolicy, len(items))
	for i := range items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &typed[i]); err != nil {
			return nil, nil, fmt.Errorf("reading NodeRepairPolicy %s: %w", items[i].GetName(), err)
		}
	}
	set, problems := policy.NewSetWith(typed, agents)
	return set, problems, nil
}

// readAgentQuietPeriods reads the agents' quiet periods as the controller
// does (its --agent-config), so that a policy an agent's override defeats
// shows as ignored here too. A ConfigMap that is not there leaves them
// unknown, as for the controller; one this user may not read is unknown
// too, and the warning says so: the controller may know more.
func readAgentQuietPeriods(ctx context.Context, c *Clients, flags controllerFlags) (policy.AgentQuietPeriods, string) {
	if flags.agentConfig == "" {
		return policy.AgentQuietPeriods{Unknown: "no agents' ConfigMap named (--agent-config is empty)"}, ""
	}
	cm, err := c.Core.CoreV1().ConfigMaps(flags.namespace).Get(ctx, flags.agentConfig, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return policy.AgentQuietPeriods{Unknown: fmt.Sprintf("ConfigMap %s/%s not found", flags.namespace, flags.agentConfig)}, ""
	case err != nil:
		why := fmt.Sprintf("cannot read the agents' quiet periods (ConfigMap %s/%s): %v; policies are judged by the registry's, and one an agent's override defeats may show as acting", flags.namespace, flags.agentConfig, apierrors.ReasonForError(err))
		return policy.AgentQuietPeriods{Unknown: why}, why
	}
	agents := policy.FromAgentConfigMap(cm)
	return agents, agents.Unknown
}

// readPause reads the pause switch as the controller does: the ConfigMap's
// existence pauses, data.reason says why.
func readPause(ctx context.Context, c *Clients, flags controllerFlags) (bool, string, error) {
	cm, err := c.Core.CoreV1().ConfigMaps(flags.namespace).Get(ctx, flags.pauseConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("cannot read the pause switch (ConfigMap %s/%s): %v; shown as not paused", flags.namespace, flags.pauseConfigMap, apierrors.ReasonForError(err))
	}
	return true, pauseReason(cm), nil
}

func pauseReason(cm *corev1.ConfigMap) string {
	if r := cm.Data["reason"]; r != "" {
		return r
	}
	return fmt.Sprintf("ConfigMap %s/%s exists", cm.Namespace, cm.Name)
}

func machineIndex(items []metav1.PartialObjectMetadata) pool.MachineLookup {
	idx := make(map[types.NamespacedName]pool.Machine, len(items))
	for i := range items {
		m := &items[i]
		idx[types.NamespacedName{Namespace: m.Namespace, Name: m.Name}] = pool.Machine{Labels: m.Labels, Owner: metav1.GetControllerOf(m)}
	}
	return func(ns, name string) (pool.Machine, bool) {
		m, ok := idx[types.NamespacedName{Namespace: ns, Name: name}]
		return m, ok
	}
}
