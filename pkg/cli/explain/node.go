package explain

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/controlplane"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// Karpenter's disruption annotation, on a pod or a node
// (karpenter.sh/v1 DoNotDisruptAnnotationKey).
const DoNotDisrupt = "karpenter.sh/do-not-disrupt"

// NodeInput is what explain reads for a node.
type NodeInput struct {
	Node *corev1.Node
	// Events regard the node and its NodeClaim.
	Events []eventlog.Event
	// Pods run on the node.
	Pods []corev1.Pod
	PDBs []policyv1.PodDisruptionBudget
	// Repair is the node's status row and its pool's count, as
	// `kubectl mend status` computes them.
	Repair fleet.Node
	Pool   fleet.Group
	// PauseConfigMap is "namespace/name" of the pause switch, for the fix.
	PauseConfigMap string
	NodeClaim      *NodeClaim
	// NodeClaims are all of Karpenter's; Karpenter tells whether they are
	// served at all.
	NodeClaims []NodeClaim
	Karpenter  bool
	// RepairsControlPlane: the node's NodeRepairPolicy opts control-plane
	// nodes in (spec.controlPlane: Repair).
	RepairsControlPlane bool
}

// Node explains a node that is not ready, unhealthy, or not repaired or
// consolidated.
func Node(in NodeInput) Report {
	n := in.Node
	r := Report{Object: "node/" + n.Name, Summary: fmt.Sprintf("pool %s, repair state %s", in.Repair.Pool, in.Repair.State)}
	var fs []Finding
	fs = append(fs, notInitialized(n)...)
	fs = append(fs, strayLabelFinding(n, in.NodeClaims, in.Karpenter)...)
	if in.NodeClaim != nil {
		fs = append(fs, launchFindings([]NodeClaim{*in.NodeClaim})...)
	}
	fs = append(fs, conditionFindings(n)...)
	fs = append(fs, repairFindings(in)...)
	fs = append(fs, controlPlaneFindings(in)...)
	fs = append(fs, disruptionFindings(in)...)
	fs = append(fs, agentWarnings(in.Events)...)
	if len(fs) == 0 {
		fs = append(fs, Finding{Cause: "nothing wrong found: Ready, nodemend's conditions healthy, nothing blocks disruption", Fix: "none needed", Source: "node"})
	}
	r.Findings = sortFindings(fs)
	return r
}

// conditionFindings explains nodemend's False conditions from the reason
// registry: what the reason means and how it recovers.
func conditionFindings(n *corev1.Node) []Finding {
	var fs []Finding
	for _, c := range n.Status.Conditions {
		if !health.IsOwned(string(c.Type)) || c.Status != corev1.ConditionFalse {
			continue
		}
		f := Finding{Cause: fmt.Sprintf("%s=False (%s): %s", c.Type, c.Reason, c.Message), Source: eventlog.Agent, Blocking: true,
			Evidence: []string{fmt.Sprintf("since %s", c.LastTransitionTime.UTC().Format("2006-01-02T15:04:05Z"))}}
		if reason, ok := health.LookupReason(c.Reason); ok {
			f.Evidence = append(f.Evidence, reason.Description)
			if reason.Source == health.FromLog && reason.QuietPeriod > 0 {
				f.Fix = fmt.Sprintf("the fault was read from logs; the condition recovers after %s without a new detection. The node is repaired if it stays unhealthy past its toleration; to look first: `kubectl mend logs %s`", reason.QuietPeriod, n.Name)
			} else {
				f.Fix = fmt.Sprintf("the condition recovers as soon as its check passes again. The node is repaired if it stays unhealthy past its toleration; to look first: `kubectl mend logs %s`", n.Name)
			}
		} else if health.IsCustomReason(c.Reason) {
			f.Evidence = append(f.Evidence, "a reason of the operator's own: a custom rule, check or promotion of the agent config (docs/agent-config.md, custom rules and checks)")
			f.Fix = fmt.Sprintf("a custom rule's fault recovers after its quiet period without a new line, a custom check's when the check passes. The node is repaired if it stays unhealthy past its toleration; to look first: `kubectl mend logs %s`", n.Name)
		} else {
			f.Fix = fmt.Sprintf("see the agent's events on the node and `kubectl mend logs %s`", n.Name)
		}
		fs = append(fs, f)
	}
	return fs
}

// repairFindings say where nodemend's repair stands and what holds it.
func repairFindings(in NodeInput) []Finding {
	row := in.Repair
	src := eventlog.Controller
	switch row.State {
	case fleet.Tolerating:
		return []Finding{{Cause: "nodemend tolerates the fault: " + row.Detail, Fix: "nothing: the node is repaired when the toleration ends, unless it recovers first", Source: src}}
	case fleet.Due:
		return []Finding{{Cause: "the repair is due: " + row.Detail, Fix: "nothing: the controller starts it on its next reconcile (a dry-run controller only emits NodeRepairWouldStart)", Source: src}}
	case fleet.NotRepaired:
		return []Finding{{Cause: "the node is unhealthy but never repaired: " + row.Detail, Fix: "repair it by hand, or set the policy's action to Replace", Source: src, Blocking: true}}
	case fleet.Invalid:
		return []Finding{{Cause: "nodemend's repair record on the node is invalid: " + row.Detail,
			Fix: "fix or remove the " + record.StateAnnotation + " annotation (and the " + record.TaintKey + " taint if no repair is wanted)", Source: src, Blocking: true}}
	case fleet.Failed:
		return []Finding{{Cause: "the repair failed: " + row.Detail, Fix: "the engine did not remove the node: check its " + row.Target + " and the engine's logs", Source: src, Blocking: true}}
	case fleet.Draining:
		f := Finding{Cause: "nodemend is draining the node " + row.Detail, Fix: "nothing, unless evictions are refused: see the PodDisruptionBudget findings", Source: src}
		if e, ok := eventlog.Latest(in.Events, "", history.DrainBlocked); ok {
			f.Evidence = append(f.Evidence, e.Message)
		}
		return append(gateFindings(in), f)
	case fleet.Terminating:
		return append(gateFindings(in), Finding{Cause: "nodemend handed the node to its engine: " + row.Detail, Fix: "nothing: the engine removes and replaces it", Source: src})
	case fleet.Blocked:
		return gateFindings(in)
	}
	return nil
}

func gateFindings(in NodeInput) []Finding {
	row := in.Repair
	src := eventlog.Controller
	switch row.Gate {
	case gate.Veto:
		return []Finding{{Cause: "repair vetoed: the node has the " + record.VetoAnnotation + " annotation (" + in.Node.Annotations[record.VetoAnnotation] + ")",
			Fix: "lift it when the node may be repaired: kubectl mend veto " + in.Node.Name + " --lift", Source: src, Blocking: true}}
	case gate.Pause:
		return []Finding{{Cause: "repairs are paused cluster-wide: " + row.Detail,
			Fix: "delete the pause ConfigMap " + in.PauseConfigMap + " when repairs may resume", Source: src, Blocking: true}}
	case gate.ControlPlane:
		return nil // controlPlaneFindings
	case gate.Pool, gate.Zone:
		what := "pool " + in.Pool.Name
		if row.Gate == gate.Zone {
			what = "zone " + row.Zone
		}
		return []Finding{{Cause: "the safety gate blocks the repair: too many nodes of " + what + " are unhealthy",
			Evidence: []string{row.Detail},
			Fix:      "repair or remove other unhealthy nodes of " + what + " first (`kubectl mend status --unhealthy`); if the limit is wrong, raise maxUnhealthy in the NodeRepairPolicy " + row.Policy,
			Source:   src, Blocking: true}}
	}
	return nil
}

// controlPlaneFindings say why a control-plane node (its role label, or
// the etcd or kube-apiserver static pod it runs) is not repaired: not at
// all unless its policy opts it in, and then only one at a time, never the
// last Ready one, an etcd member only while quorum holds — the controller's
// latest word on it as evidence.
func controlPlaneFindings(in NodeInput) []Finding {
	role := controlplane.RoleOf(in.Node, in.Pods)
	if !role.Any() {
		return nil
	}
	held := in.Repair.State == fleet.Due || in.Repair.State == fleet.Blocked
	f := Finding{Source: eventlog.Controller, Blocking: held}
	if !in.RepairsControlPlane {
		f.Cause = fmt.Sprintf("%s is a control-plane node (%s): nodemend does not repair control-plane nodes unless their NodeRepairPolicy opts them in", in.Node.Name, role)
		f.Fix = "repair it by hand, or set spec.controlPlane: Repair in the NodeRepairPolicy " + in.Repair.Policy +
			" (then one at a time cluster-wide, never the last Ready one, an etcd member only while the other members keep quorum)"
	} else {
		f.Cause = fmt.Sprintf("%s is a control-plane node (%s); policy %s repairs control-plane nodes one at a time, never the last Ready one, an etcd member only while the other members keep quorum", in.Node.Name, role, in.Repair.Policy)
		f.Fix = "nothing, unless the controller's event below holds it: then repair the other control-plane nodes or etcd members first"
		f.Blocking = false
	}
	if e, ok := eventlog.Latest(in.Events, eventlog.Controller, history.Blocked); ok && strings.Contains(e.Message, "is a control-plane node") {
		f.Evidence = append(f.Evidence, e.Message)
		f.Blocking = f.Blocking || held
	}
	return []Finding{f}
}

// disruptionFindings name what stops a drain, Karpenter's consolidation or
// a repair's eviction: do-not-disrupt, PodDisruptionBudgets without
// disruptions left, and pods no controller would recreate.
func disruptionFindings(in NodeInput) []Finding {
	var fs []Finding
	if v, ok := in.Node.Annotations[DoNotDisrupt]; ok && v == "true" {
		fs = append(fs, Finding{Cause: "the node has " + DoNotDisrupt + "=true: Karpenter never disrupts it (consolidation, drift, expiry)",
			Fix: "remove the annotation when the node may go: kubectl annotate node " + in.Node.Name + " " + DoNotDisrupt + "-", Source: "node", Blocking: true})
	}
	var dnd, orphans []string
	blockingPDBs := map[string][]string{}
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || isDaemonOrMirror(p) {
			continue
		}
		if p.Annotations[DoNotDisrupt] == "true" {
			dnd = append(dnd, p.Namespace+"/"+p.Name)
		}
		if metav1.GetControllerOf(p) == nil {
			orphans = append(orphans, p.Namespace+"/"+p.Name)
		}
		for j := range in.PDBs {
			pdb := &in.PDBs[j]
			if pdb.Namespace != p.Namespace || pdb.Status.DisruptionsAllowed > 0 || pdb.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
				k := pdb.Namespace + "/" + pdb.Name
				blockingPDBs[k] = append(blockingPDBs[k], p.Name)
			}
		}
	}
	if len(dnd) > 0 {
		fs = append(fs, Finding{Cause: fmt.Sprintf("%d pod(s) have %s=true: Karpenter does not consolidate or drift the node while they run", len(dnd), DoNotDisrupt),
			Evidence: []string{"pods: " + list(dnd)},
			Fix:      "let them finish (jobs), or remove the annotation; nodemend's repair is not held by it (a faulty node is drained regardless)", Source: "pods", Blocking: true})
	}
	if len(blockingPDBs) > 0 {
		var names []string
		for k, pods := range blockingPDBs {
			names = append(names, fmt.Sprintf("%s (pods %s)", k, list(pods)))
		}
		sort.Strings(names)
		f := Finding{Cause: fmt.Sprintf("%d PodDisruptionBudget(s) allow no disruption now: evictions of their pods are refused", len(blockingPDBs)),
			Evidence: names,
			Fix:      "scale the workload up or fix its unready replicas so the budget allows one disruption, or loosen minAvailable/maxUnavailable; nodemend deletes the pods anyway after its drain deadline",
			Source:   "poddisruptionbudgets", Blocking: true}
		for _, e := range in.Events {
			if e.Source == eventlog.Karpenter && strings.Contains(e.Message, "prevents pod evictions") {
				f.Evidence = append(f.Evidence, fmt.Sprintf("karpenter %s: %q", e.Reason, e.Message))
			}
		}
		fs = append(fs, f)
	}
	if len(orphans) > 0 {
		fs = append(fs, Finding{Cause: fmt.Sprintf("%d pod(s) have no controller: nothing recreates them once evicted", len(orphans)),
			Evidence: []string{"pods: " + list(orphans)},
			Fix:      "run them under a Deployment, StatefulSet or Job; cluster-autoscaler refuses to remove the node for them, while Karpenter and nodemend's drain evict them and they are gone",
			Source:   "pods"})
	}
	for _, reason := range []string{"DisruptionBlocked", "Unconsolidatable"} {
		if e, ok := eventlog.Latest(in.Events, eventlog.Karpenter, reason); ok && !strings.Contains(e.Message, "prevents pod evictions") {
			fs = append(fs, Finding{Cause: "Karpenter does not disrupt the node: " + e.Message, Evidence: []string{fmt.Sprintf("karpenter %s (x%d)", e.Reason, e.Count)},
				Fix: karpenterBlockFix(e.Message), Source: eventlog.Karpenter})
		}
	}
	return fs
}

func karpenterBlockFix(msg string) string {
	switch {
	case containsAny(msg, "nominated"):
		return "nothing: the scheduler is about to place a pending pod there"
	case containsAny(msg, "budget"):
		return "the NodePool's disruption budget allows no disruption now; widen spec.disruption.budgets"
	case containsAny(msg, "SpotToSpotConsolidation"):
		return "enable the SpotToSpotConsolidation feature gate if spot-to-spot replacement is wanted"
	case containsAny(msg, "cheaper", "price", "candidates"):
		return "nothing: consolidation found no cheaper arrangement"
	}
	return "see Karpenter's disruption documentation for this message"
}

func isDaemonOrMirror(p *corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}

func list(ss []string) string {
	sort.Strings(ss)
	if len(ss) > 6 {
		return strings.Join(ss[:6], ", ") + fmt.Sprintf(" and %d more", len(ss)-6)
	}
	return strings.Join(ss, ", ")
}

// agentWarnings summarises the agent's Warning events: not faults that
// repair, but what the node has been through.
func agentWarnings(evs []eventlog.Event) []Finding {
	counts := map[string]int32{}
	last := map[string]string{}
	for _, e := range evs {
		if e.Source != eventlog.Agent || e.Type != corev1.EventTypeWarning {
			continue
		}
		counts[e.Reason] += e.Count
		last[e.Reason] = e.Message
	}
	if len(counts) == 0 {
		return nil
	}
	var ev []string
	for r, n := range counts {
		ev = append(ev, fmt.Sprintf("%s x%d: %s", r, n, last[r]))
	}
	sort.Strings(ev)
	return []Finding{{Cause: fmt.Sprintf("nodemend-agent reported %d kind(s) of warning on the node", len(counts)), Evidence: ev,
		Fix: "warnings do not make the node repairable; recurring ones are worth a look (`kubectl mend logs NODE`)", Source: eventlog.Agent}}
}
