package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/controlplane"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// This file keeps control-plane nodes from being repaired like workers
// (pkg/repair/controlplane): by default not at all, and where a policy opts
// them in, one at a time, never the last Ready one, and an etcd member only
// while etcd keeps quorum without it.

// EtcdHealth says whether etcd answers now, as the cluster itself reports
// it. The quorum judgement needs both halves: this (etcd as a whole has
// quorum now) and each member's own health (its static pod's readiness,
// which its kubelet probes on the member's health endpoint), so that a
// member is taken out only while the rest keep quorum.
type EtcdHealth interface {
	// Healthy returns nil when etcd answers, or why it does not.
	Healthy(ctx context.Context) error
}

// APIServerEtcdHealth reads the kube-apiserver's own etcd check,
// GET /readyz/etcd: the server answers ok only when its etcd answers a
// read, which needs quorum. It is the cluster's health endpoint that every
// API server serves, on managed control planes too, and needs only the
// /readyz non-resource permission (the chart's ClusterRole grants it).
type APIServerEtcdHealth struct {
	REST rest.Interface
}

// Healthy implements EtcdHealth.
func (h APIServerEtcdHealth) Healthy(ctx context.Context) error {
	body, err := h.REST.Get().AbsPath("/readyz/etcd").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver /readyz/etcd: %v %s", err, body)
	}
	return nil
}

// podNodeIndex indexes the cached kube-system pods by their node.
const podNodeIndex = "spec.nodeName"

// controlPlaneGate decides for a due node: allowed for a worker; for a
// control-plane node, controlplane.Decide on the cluster's control-plane
// nodes and etcd members as the API reports them now (not the cache: the
// static pods are not cached, and the decision is rare).
//
// An opted-in control-plane node's decision holds r.controlPlaneMu until
// release is called, after the repair's start is written: two such nodes
// due at once would otherwise each see the other not under repair. The
// nodes are read from the API server, not the cache, for the same reason.
func (r *Reconciler) controlPlaneGate(ctx context.Context, node *corev1.Node, pol policy.Policy) (d gate.Decision, release func(), err error) {
	release = func() {}
	role := controlplane.RoleOf(node, nil)
	if !role.Any() {
		// Unlabelled: only its own static pods could make it one. They
		// are read from the cache (kube-system's pods, indexed by node):
		// every due node asks, and an uncached read per decision would
		// be a request more per repair, during an outage too.
		pods := &corev1.PodList{}
		if err := r.client.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingFields{podNodeIndex: node.Name}); err != nil {
			return gate.Decision{}, release, err
		}
		if role = controlplane.RoleOf(node, pods.Items); !role.Any() {
			return gate.Decision{Allowed: true}, release, nil
		}
	}
	in := controlplane.Input{Node: node.Name, Role: role, OptedIn: pol.RepairControlPlane, Policy: pol.Name}
	if in.OptedIn {
		r.controlPlaneMu.Lock()
		release = r.controlPlaneMu.Unlock
		if err := r.controlPlanePeers(ctx, node, &in); err != nil {
			release()
			return gate.Decision{}, func() {}, err
		}
		if len(in.Members) > 0 && r.etcd != nil {
			if err := r.etcd.Healthy(ctx); err != nil {
				return gate.Decision{Gate: gate.ControlPlane, Message: fmt.Sprintf("%s is a control-plane node (%s): etcd is not healthy now, so no member is taken out: %v", node.Name, in.Role, err)}, release, nil
			}
		}
	}
	cd := controlplane.Decide(in)
	if cd.Allowed {
		return gate.Decision{Allowed: true, Message: cd.Message}, release, nil
	}
	return gate.Decision{Gate: gate.ControlPlane, Message: cd.Message}, release, nil
}

// controlPlanePeers fills in the other control-plane nodes and the etcd
// members, from the API server.
func (r *Reconciler) controlPlanePeers(ctx context.Context, node *corev1.Node, in *controlplane.Input) error {
	pods := &corev1.PodList{}
	if err := r.apiReader.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem)); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := r.apiReader.List(ctx, nodes); err != nil {
		return err
	}
	in.Role = controlplane.RoleOf(node, pods.Items)
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name != node.Name && controlplane.RoleOf(n, pods.Items).Any() {
			in.Peers = append(in.Peers, controlplane.Peer{Name: n.Name, Ready: controlplane.NodeReady(n), UnderRepair: record.InRepair(n)})
		}
	}
	in.Members = controlplane.MembersOf(nodes.Items, pods.Items)
	return nil
}
