// Package outofservice decides when a node under repair gets Kubernetes'
// out-of-service taint (non-graceful node shutdown, GA in 1.28) and when it
// loses it. It is pure: the caller reads the node and writes the taint.
//
// A node whose kubelet is gone keeps its pods: the API server never hears
// they stopped, so a StatefulSet's replacement pod waits for a name that is
// never freed, and its volumes stay attached to a node that will never
// detach them. The taint tells the controller-manager to force-delete the
// node's pods (its pod garbage collector) and to detach their volumes at
// once (its attach/detach controller). Kubernetes asks for it only on a node
// that is shut down; nodemend sets it only on a node that its ladder has
// left out of service (quarantined, or on a rung its silent agent cannot
// carry out), whose kubelet and agent have both stopped reporting, once the
// repair's drain deadline has passed — the time the policy gives pods to
// leave in any case. It removes the taint as soon as the kubelet reports
// Ready again: the node is back, its pods are gone, and new ones may come.
package outofservice

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The taint, as Kubernetes documents it (kubectl taint nodes NODE
// node.kubernetes.io/out-of-service=nodeshutdown:NoExecute).
const (
	TaintKey   = "node.kubernetes.io/out-of-service"
	TaintValue = "nodeshutdown"
)

// Taint is the out-of-service taint.
func Taint() corev1.Taint {
	return corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute}
}

// Has reports whether n carries the out-of-service taint.
func Has(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKey {
			return true
		}
	}
	return false
}

// Input is what the decision depends on.
type Input struct {
	Node *corev1.Node
	// OutOfService: the ladder has left the node out of service for long —
	// quarantined, or on a rung it cannot carry out because its agent is
	// silent.
	OutOfService bool
	// AgentSilent: the node's agent has not heartbeated within its bound
	// (pkg/repair/ladder.AgentSilent).
	AgentSilent bool
	// Started is when the repair started (the node was tainted for it);
	// DrainDeadline the policy's drain deadline.
	Started       time.Time
	DrainDeadline time.Duration
	Now           time.Time
}

// Action is what to do with the taint.
type Action int

const (
	// Keep leaves the node as it is.
	Keep Action = iota
	// Add taints the node out of service.
	Add
	// Remove takes the taint off.
	Remove
)

// KubeletGone reports the kubelet's Ready condition Unknown (the node
// lifecycle controller's verdict on a kubelet that stopped renewing its
// lease) or absent.
func KubeletGone(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionUnknown
		}
	}
	return true
}

func kubeletReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Decide says what to do with the taint, and why.
func Decide(in Input) (Action, string) {
	has := Has(in.Node)
	if has && kubeletReady(in.Node) {
		return Remove, "the node's kubelet is Ready again: the node is back, its pods were moved off"
	}
	if has || !in.OutOfService {
		return Keep, ""
	}
	if !KubeletGone(in.Node) || !in.AgentSilent {
		return Keep, ""
	}
	deadline := in.Started.Add(in.DrainDeadline)
	if in.Now.Before(deadline) {
		return Keep, ""
	}
	return Add, fmt.Sprintf("the node is out of service for its repair, its kubelet and its agent have stopped reporting, and the drain deadline passed at %s: "+
		"its pods are force-deleted and their volumes detached so that they can start elsewhere (non-graceful node shutdown)", deadline.UTC().Format(time.RFC3339))
}
