package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// knownTypes lists every kind of this group version; add new kinds here.
func knownTypes() []runtime.Object {
	return []runtime.Object{
		&NodeDiagnostic{}, &NodeDiagnosticList{},
		&NodeRepairPolicy{}, &NodeRepairPolicyList{},
		&NodeRemediation{}, &NodeRemediationList{},
	}
}

func metav1AddToGroupVersion(s *runtime.Scheme) { metav1.AddToGroupVersion(s, GroupVersion) }
