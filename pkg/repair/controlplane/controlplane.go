// Package controlplane decides whether a control-plane node may be
// repaired: the node that runs an API server or an etcd member is the one
// whose loss can turn a broken node into a broken cluster. It is pure: the
// caller reads the nodes and the pods.
//
// Such nodes are not repaired by default. A NodeRepairPolicy may opt them
// in; then, as Cluster API's KubeadmControlPlane remediates, one at a time
// cluster-wide, never the last Ready one, and an etcd member only while the
// other members keep quorum — judged from the members' own health as the
// cluster reports it (each etcd static pod's readiness, which its kubelet
// probes on etcd's health endpoint), never assumed.
package controlplane

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels and names by which a node is known to be a control-plane node.
const (
	// RoleLabel is the control-plane role label kubeadm and most
	// installers set; LegacyRoleLabel the one before Kubernetes 1.24.
	RoleLabel       = "node-role.kubernetes.io/control-plane"
	LegacyRoleLabel = "node-role.kubernetes.io/master"
	// MirrorAnnotation marks the API server's copy of a static pod.
	MirrorAnnotation = "kubernetes.io/config.mirror"
	// ComponentLabel names a static pod's component (kubeadm's manifests:
	// component=etcd, component=kube-apiserver).
	ComponentLabel = "component"
)

// Role is what makes a node a control-plane node; the zero Role is a
// worker.
type Role struct {
	// Labeled: the node carries a control-plane role label.
	Labeled bool
	// Etcd, APIServer: an etcd member or an API server runs on it as a
	// static pod.
	Etcd, APIServer bool
}

// Any reports whether the node is a control-plane node.
func (r Role) Any() bool { return r.Labeled || r.Etcd || r.APIServer }

// String says why the node is a control-plane node, for events and
// kubectl mend explain.
func (r Role) String() string {
	var why []string
	if r.Labeled {
		why = append(why, "the control-plane role label")
	}
	if r.Etcd {
		why = append(why, "an etcd member (static pod)")
	}
	if r.APIServer {
		why = append(why, "a kube-apiserver (static pod)")
	}
	if len(why) == 0 {
		return "a worker"
	}
	return strings.Join(why, ", ")
}

// RoleOf judges a node from its labels and the pods bound to it.
func RoleOf(node *corev1.Node, pods []corev1.Pod) Role {
	var r Role
	if _, ok := node.Labels[RoleLabel]; ok {
		r.Labeled = true
	}
	if _, ok := node.Labels[LegacyRoleLabel]; ok {
		r.Labeled = true
	}
	for i := range pods {
		switch component(&pods[i], node.Name) {
		case "etcd":
			r.Etcd = true
		case "kube-apiserver":
			r.APIServer = true
		}
	}
	return r
}

// component is "etcd" or "kube-apiserver" for those static pods on node,
// "" for any other pod. A static pod's mirror carries the kubelet's mirror
// annotation and lives in kube-system, where only administrators and the
// kubelets create pods (a tenant's pod named etcd-NODE elsewhere proves
// nothing); its component label (kubeadm's manifests) or the kubelet's
// naming (NAME-NODE) says which it is. Erring towards a control-plane node
// only withholds a repair.
func component(p *corev1.Pod, node string) string {
	if p.Spec.NodeName != node || p.Namespace != "kube-system" {
		return ""
	}
	if _, mirror := p.Annotations[MirrorAnnotation]; !mirror {
		return ""
	}
	for _, c := range []string{"etcd", "kube-apiserver"} {
		if p.Labels[ComponentLabel] == c || p.Name == c+"-"+node {
			return c
		}
	}
	return ""
}

// Member is one etcd member as the cluster reports it.
type Member struct {
	// Node runs the member.
	Node string
	// Healthy: the member's static pod is Ready (its kubelet probes etcd's
	// health endpoint) on a node whose kubelet is Ready (so that the pod's
	// readiness is current).
	Healthy bool
}

// MembersOf lists the etcd members of the nodes, with their health, from
// their etcd static pods.
func MembersOf(nodes []corev1.Node, pods []corev1.Pod) []Member {
	ready := map[string]bool{}
	for i := range nodes {
		ready[nodes[i].Name] = NodeReady(&nodes[i])
	}
	var out []Member
	for i := range pods {
		p := &pods[i]
		if _, known := ready[p.Spec.NodeName]; !known || component(p, p.Spec.NodeName) != "etcd" {
			continue
		}
		out = append(out, Member{Node: p.Spec.NodeName, Healthy: ready[p.Spec.NodeName] && podReady(p)})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// NodeReady reports the kubelet's Ready condition True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Quorum reports whether etcd keeps quorum without the member on node
// without: a majority of all members (the member removed counts as lost,
// whether it is healthy now or not) must be healthy among the others.
func Quorum(members []Member, without string) (bool, string) {
	need := len(members)/2 + 1
	healthy, others := 0, 0
	var unhealthy []string
	for _, m := range members {
		if m.Node == without {
			continue
		}
		others++
		if m.Healthy {
			healthy++
		} else {
			unhealthy = append(unhealthy, m.Node)
		}
	}
	why := fmt.Sprintf("without %s, %d of the %d etcd members are healthy, %d needed for quorum", without, healthy, len(members), need)
	if len(unhealthy) > 0 {
		why += fmt.Sprintf(" (not healthy: %s)", strings.Join(unhealthy, ", "))
	}
	return healthy >= need, why
}

// Peer is another control-plane node of the cluster.
type Peer struct {
	Name string
	// Ready: its kubelet is Ready.
	Ready bool
	// UnderRepair: nodemend is repairing it (tainted, any phase).
	UnderRepair bool
}

// Input is what the decision for one control-plane node depends on.
type Input struct {
	// Node is the candidate and Role why it is a control-plane node.
	Node string
	Role Role
	// OptedIn: the node's NodeRepairPolicy repairs control-plane nodes;
	// Policy names it.
	OptedIn bool
	Policy  string
	// Peers are the other control-plane nodes.
	Peers []Peer
	// Members are the etcd members (static pods) of the cluster.
	Members []Member
}

// Decision is the outcome: Allowed, or the reason it is not.
type Decision struct {
	Allowed bool
	Message string
}

// Decide says whether the control-plane node may be repaired now.
func Decide(in Input) Decision {
	what := fmt.Sprintf("%s is a control-plane node (%s)", in.Node, in.Role)
	if !in.OptedIn {
		return Decision{Message: what + ": control-plane nodes are not repaired unless the node's NodeRepairPolicy opts them in (spec.controlPlane: Repair, docs/repair.md)"}
	}
	ready := 0
	for _, p := range in.Peers {
		if p.UnderRepair {
			return Decision{Message: fmt.Sprintf("%s: %s is under repair, and control-plane nodes are repaired one at a time", what, p.Name)}
		}
		if p.Ready && !p.UnderRepair {
			ready++
		}
	}
	if ready == 0 {
		return Decision{Message: what + ": it is the last Ready control-plane node (no other control-plane node's kubelet is Ready)"}
	}
	if in.Role.Etcd || slices.ContainsFunc(in.Members, func(m Member) bool { return m.Node == in.Node }) {
		if ok, why := Quorum(in.Members, in.Node); !ok {
			return Decision{Message: fmt.Sprintf("%s: etcd would lose quorum: %s", what, why)}
		}
	}
	msg := fmt.Sprintf("%s; policy %s repairs control-plane nodes: no other is under repair, %d other Ready", what, in.Policy, ready)
	if len(in.Members) > 0 {
		_, why := Quorum(in.Members, in.Node)
		msg += "; " + why
	}
	return Decision{Allowed: true, Message: msg}
}
