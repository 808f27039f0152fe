package cli

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// The resources read as unstructured. Karpenter's v1 API is the only one
// Karpenter ≥ 1.0 serves; Cluster API's served version is discovered,
// as the controller does, since clusters run v1beta1 or v1beta2.
var (
	nodeClaimGVR        = schema.GroupVersionResource{Group: pool.KarpenterGroup, Version: "v1", Resource: "nodeclaims"}
	nodePoolGVR         = schema.GroupVersionResource{Group: pool.KarpenterGroup, Version: "v1", Resource: "nodepools"}
	nodeRepairPolicyGVR = v1alpha1.GroupVersion.WithResource("noderepairpolicies")
)

// machineGVR returns the served Cluster API Machine resource; ok is false
// when Cluster API is not installed.
func machineGVR(d discovery.DiscoveryInterface) (schema.GroupVersionResource, bool) {
	groups, err := d.ServerGroups()
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	for _, g := range groups.Groups {
		if g.Name == pool.ClusterAPIGroup && g.PreferredVersion.Version != "" {
			return schema.GroupVersionResource{Group: g.Name, Version: g.PreferredVersion.Version, Resource: "machines"}, true
		}
	}
	return schema.GroupVersionResource{}, false
}
