package explain

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// karpenterNodePoolLabel is the label Karpenter puts on the nodes it
// launches (karpenter.sh/v1 NodePoolLabelKey).
const karpenterNodePoolLabel = "karpenter.sh/nodepool"

// karpenterControllerName is the app.kubernetes.io/name of the Karpenter
// chart's controller pods (charts/karpenter: the chart's name).
const karpenterControllerName = "karpenter"

// avoidsKarpenterNodes reports whether the pod requires nodes without
// karpenter.sh/nodepool, as the Karpenter chart's controller does
// (affinity.nodeAffinity.required: karpenter.sh/nodepool DoesNotExist).
// Karpenter launches nothing for such a pod: its provisioner skips it as
// "configured to not run on a Karpenter provisioned node"
// (pkg/controllers/provisioning/provisioner.go).
func avoidsKarpenterNodes(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		found := false
		for _, e := range t.MatchExpressions {
			if e.Key == karpenterNodePoolLabel && e.Operator == corev1.NodeSelectorOpDoesNotExist {
				found = true
			}
		}
		if !found {
			return false // another term may land on Karpenter's nodes
		}
	}
	return true
}

// managedByKarpenter reports whether a NodeClaim stands for the node: its
// owner reference, or a NodeClaim whose status names the node or its
// provider ID (a node not registered yet has no owner reference).
func managedByKarpenter(n *corev1.Node, claims []NodeClaim) bool {
	for _, o := range n.OwnerReferences {
		if o.Kind == "NodeClaim" && strings.HasPrefix(o.APIVersion, "karpenter.sh/") {
			return true
		}
	}
	for _, c := range claims {
		if c.NodeName == n.Name || (c.ProviderID != "" && c.ProviderID == n.Spec.ProviderID) {
			return true
		}
	}
	return false
}

// strayNodePoolLabels lists the nodes that carry karpenter.sh/nodepool but
// that no NodeClaim stands for.
func strayNodePoolLabels(nodes []corev1.Node, claims []NodeClaim) []string {
	var out []string
	for i := range nodes {
		if _, ok := nodes[i].Labels[karpenterNodePoolLabel]; ok && !managedByKarpenter(&nodes[i], claims) {
			out = append(out, nodes[i].Name)
		}
	}
	return out
}

// karpenterSelfFindings explains a pending pod that must run off
// Karpenter's nodes, Karpenter's own controller above all: Karpenter
// cannot launch the capacity it runs on.
func karpenterSelfFindings(in PodInput) []Finding {
	p := in.Pod
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || !avoidsKarpenterNodes(p) {
		return nil
	}
	// The nodes it may run on: no karpenter.sh/nodepool, and its other
	// node selection, matched as the scheduler matches it.
	required := nodeaffinity.GetRequiredNodeAffinity(p)
	var labelled, free []string
	for i := range in.Nodes {
		if _, ok := in.Nodes[i].Labels[karpenterNodePoolLabel]; ok {
			labelled = append(labelled, in.Nodes[i].Name)
		} else if ok, _ := required.Match(&in.Nodes[i]); ok {
			free = append(free, in.Nodes[i].Name)
		}
	}
	own := p.Labels["app.kubernetes.io/name"] == karpenterControllerName
	f := Finding{Source: "pod spec", Blocking: true}
	if own {
		f.Cause = "Karpenter's own controller pod is pending, and Karpenter does not launch nodes for itself: it must run on capacity it does not manage"
	} else {
		f.Cause = "the pod requires a node without karpenter.sh/nodepool (not launched by Karpenter), and Karpenter launches nothing for such a pod"
	}
	f.Evidence = append(f.Evidence, "required node affinity: karpenter.sh/nodepool DoesNotExist (Karpenter skips the pod: \"configured to not run on a Karpenter provisioned node\")",
		fmt.Sprintf("%d of %d nodes carry karpenter.sh/nodepool; nodes without it that its node selection allows: %s", len(labelled), len(in.Nodes), listOrNone(free)))
	if stray := strayNodePoolLabels(in.Nodes, in.NodeClaims); len(stray) > 0 && in.Karpenter {
		f.Evidence = append(f.Evidence, fmt.Sprintf("%d of those carry the label but no NodeClaim stands for them (labelled by hand or by a node group): %s", len(stray), list(stray)))
	}
	if perNode := hostnameAntiAffinity(p); perNode {
		f.Evidence = append(f.Evidence, fmt.Sprintf("required podAntiAffinity on kubernetes.io/hostname: one replica per node, so the %d node(s) without the label hold at most %d replica(s)", len(free), len(free)))
	}
	f.Fix = "run it on nodes Karpenter does not manage: a managed node group (or a Fargate profile for its namespace) with at least as many nodes as replicas " +
		"(the Karpenter chart runs 2, one per node), or lower the replicas to 1; remove karpenter.sh/nodepool from nodes no NodeClaim stands for " +
		"(`kubectl label node NODE karpenter.sh/nodepool-`, and from the node group's labels)"
	return []Finding{f}
}

func hostnameAntiAffinity(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == corev1.LabelHostname {
			return true
		}
	}
	return false
}

func listOrNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return list(ss)
}

// strayLabelFinding explains a node that carries karpenter.sh/nodepool but
// that Karpenter does not manage (no NodeClaim): Karpenter's own pods and
// everything else that avoids Karpenter's nodes stay off it, nodemend
// counts it into that NodePool's safety gate and would repair it through
// the Karpenter backend, whose NodeClaim does not exist.
func strayLabelFinding(n *corev1.Node, claims []NodeClaim, karpenter bool) []Finding {
	np, ok := n.Labels[karpenterNodePoolLabel]
	if !ok || managedByKarpenter(n, claims) {
		return nil
	}
	why := "no NodeClaim stands for it (no owner reference; no NodeClaim's status names the node or its provider ID)"
	if !karpenter {
		why = "Karpenter is not installed (no NodeClaims are served)"
	}
	return []Finding{{
		Cause: fmt.Sprintf("the node carries karpenter.sh/nodepool=%s but Karpenter does not manage it: %s", np, why),
		Evidence: []string{
			"pods that avoid Karpenter's nodes (the Karpenter controller's required karpenter.sh/nodepool DoesNotExist) cannot run here",
			fmt.Sprintf("nodemend counts the node into NodePool %s's safety gate and would repair it by deleting its NodeClaim, which does not exist: the repair would fail", np),
		},
		Fix: fmt.Sprintf("remove the label (`kubectl label node %s karpenter.sh/nodepool-`) and from whatever sets it (the node group's labels, kubelet --node-labels in user data); "+
			"capacity meant for Karpenter is launched by a NodePool, never labelled by hand", n.Name),
		Source: "node", Blocking: true,
	}}
}
