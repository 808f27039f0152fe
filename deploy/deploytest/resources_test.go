package deploytest

import "k8s.io/apimachinery/pkg/runtime/schema"

var (
	nrpResource   = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderepairpolicies"}
	ndiagResource = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "nodediagnostics"}
	nremResource  = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderemediations"}
)
