package pool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations}}
}

func TestOf(t *testing.T) {
	capiAnn := map[string]string{MachineAnnotation: "m-1", ClusterNamespaceAnnotation: "prod", OwnerKindAnnotation: "MachineSet", OwnerNameAnnotation: "workers-abc"}
	machines := map[string]Machine{
		"prod/m-1": {Labels: map[string]string{MachineDeploymentLabel: "workers", MachineSetLabel: "workers-abc"}},
		"prod/m-2": {Labels: map[string]string{MachineSetLabel: "lonely-set"}},
		"prod/m-3": {Owner: &metav1.OwnerReference{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane", Name: "cp"}},
	}
	lookup := func(ns, name string) (Machine, bool) { m, ok := machines[ns+"/"+name]; return m, ok }
	with := func(m string) map[string]string {
		a := map[string]string{}
		for k, v := range capiAnn {
			a[k] = v
		}
		a[MachineAnnotation] = m
		return a
	}
	tests := []struct {
		name     string
		resolver Resolver
		node     *corev1.Node
		machines MachineLookup
		want     string
		object   bool
	}{
		{"plain node", Resolver{}, node(nil, nil), lookup, "cluster", false},
		{"karpenter", Resolver{}, node(map[string]string{KarpenterNodePoolLabel: "gpu"}, nil), lookup, "NodePool/gpu", true},
		{"configured label wins", Resolver{Label: "pool"}, node(map[string]string{"pool": "a", KarpenterNodePoolLabel: "gpu"}, nil), lookup, "label/pool=a", false},
		{"configured label absent", Resolver{Label: "pool"}, node(map[string]string{KarpenterNodePoolLabel: "gpu"}, nil), lookup, "NodePool/gpu", true},
		{"capi machine deployment", Resolver{}, node(nil, with("m-1")), lookup, "MachineDeployment/prod/workers", true},
		{"capi machine set", Resolver{}, node(nil, with("m-2")), lookup, "MachineSet/prod/lonely-set", true},
		{"capi other owner", Resolver{}, node(nil, with("m-3")), lookup, "KubeadmControlPlane/prod/cp", true},
		{"capi machine not cached: node annotations", Resolver{}, node(nil, with("m-9")), lookup, "MachineSet/prod/workers-abc", true},
		{"capi not installed", Resolver{}, node(nil, with("m-1")), nil, "MachineSet/prod/workers-abc", true},
		{"capi without owner annotations", Resolver{}, node(nil, map[string]string{MachineAnnotation: "m-9", ClusterNamespaceAnnotation: "prod"}), lookup, "cluster", false},
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
