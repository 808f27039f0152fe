package backends

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

func nodeWith(labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations}}
}

// Each engine backend pools its own nodes: the pools the gate counts.
func TestPoolsOf(t *testing.T) {
	capiAnn := map[string]string{clusterapi.MachineAnnotation: "m-1", clusterapi.ClusterNamespaceAnnotation: "prod", clusterapi.OwnerKindAnnotation: "MachineSet", clusterapi.OwnerNameAnnotation: "workers-abc"}
	machines := map[string]pool.Machine{
		"prod/m-1": {Labels: map[string]string{clusterapi.MachineDeploymentLabel: "workers", clusterapi.MachineSetLabel: "workers-abc"}},
		"prod/m-2": {Labels: map[string]string{clusterapi.MachineSetLabel: "lonely-set"}},
		"prod/m-3": {Owner: &metav1.OwnerReference{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane", Name: "cp"}},
	}
	lookup := func(ns, name string) (pool.Machine, bool) { m, ok := machines[ns+"/"+name]; return m, ok }
	with := func(m string) map[string]string {
		a := map[string]string{}
		for k, v := range capiAnn {
			a[k] = v
		}
		a[clusterapi.MachineAnnotation] = m
		return a
	}
	tests := []struct {
		name     string
		resolver pool.Resolver
		node     *corev1.Node
		machines pool.MachineLookup
		want     string
		object   bool
	}{
		{"plain node", Pools(""), nodeWith(nil, nil), lookup, "cluster", false},
		{"karpenter", Pools(""), nodeWith(map[string]string{karpenter.NodePoolLabel: "gpu"}, nil), lookup, "NodePool/gpu", true},
		{"configured label wins", Pools("pool"), nodeWith(map[string]string{"pool": "a", karpenter.NodePoolLabel: "gpu"}, nil), lookup, "label/pool=a", false},
		{"configured label absent", Pools("pool"), nodeWith(map[string]string{karpenter.NodePoolLabel: "gpu"}, nil), lookup, "NodePool/gpu", true},
		{"capi machine deployment", Pools(""), nodeWith(nil, with("m-1")), lookup, "MachineDeployment/prod/workers", true},
		{"capi machine set", Pools(""), nodeWith(nil, with("m-2")), lookup, "MachineSet/prod/lonely-set", true},
		{"capi other owner", Pools(""), nodeWith(nil, with("m-3")), lookup, "KubeadmControlPlane/prod/cp", true},
		{"capi machine not cached: node annotations", Pools(""), nodeWith(nil, with("m-9")), lookup, "MachineSet/prod/workers-abc", true},
		{"capi not installed", Pools(""), nodeWith(nil, with("m-1")), nil, "MachineSet/prod/workers-abc", true},
		{"capi without owner annotations", Pools(""), nodeWith(nil, map[string]string{clusterapi.MachineAnnotation: "m-9", clusterapi.ClusterNamespaceAnnotation: "prod"}), lookup, "cluster", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.resolver.Of(tt.node, tt.machines)
			if p.String() != tt.want || p.HasObject() != tt.object {
				t.Errorf("Of = %s (object %v), want %s (object %v)", p, p.HasObject(), tt.want, tt.object)
			}
		})
	}
}
