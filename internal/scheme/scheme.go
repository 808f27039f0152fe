// Package scheme builds the runtime scheme of the repair controller: the
// built-in kinds and nodemend's. Engine kinds (NodeClaim, Machine) are not in
// it: they are handled as unstructured or metadata-only objects.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// New returns a fresh scheme.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registration: fails only on a programming error
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
