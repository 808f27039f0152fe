package cli

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
)

// The resources read as unstructured. Karpenter's v1 API is the only one
// Karpenter ≥ 1.0 serves; the served version of the kind the backends pool
// nodes by (Cluster API's Machine: clusters run v1beta1 or v1beta2) is
// discovered, as the controller does.
var (
	nodeClaimGVR        = schema.GroupVersionResource{Group: karpenter.Group, Version: "v1", Resource: "nodeclaims"}
	nodePoolGVR         = schema.GroupVersionResource{Group: karpenter.Group, Version: "v1", Resource: "nodepools"}
	nodeRepairPolicyGVR = v1alpha1.GroupVersion.WithResource("noderepairpolicies")
)

// machineGVR returns the served resource of the kind the backends look up
// to pool nodes (backends.Watches: Cluster API's Machine), in its preferred
// version, as the controller maps it; ok is false when the cluster serves
// none (Cluster API is not installed).
func machineGVR(d discovery.DiscoveryInterface) (schema.GroupVersionResource, bool) {
	m := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d))
	for _, gk := range backends.Watches() {
		if mapping, err := m.RESTMapping(gk); err == nil {
			return mapping.Resource, true
		}
	}
	return schema.GroupVersionResource{}, false
}
