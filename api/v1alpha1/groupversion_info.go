// Package v1alpha1 holds nodemend's API types (group nodemend.dev):
// NodeRepairPolicy for the repair controller and NodeDiagnostic for on-demand
// diagnostics. CRDs are generated into deploy/crds by `make generate`.
//
// +kubebuilder:object:generate=true
// +groupName=nodemend.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "nodemend.dev", Version: "v1alpha1"}

// AddToScheme adds the types of this package to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	for _, obj := range knownTypes() {
		s.AddKnownTypes(GroupVersion, obj)
	}
	metav1AddToGroupVersion(s)
	return nil
}
