// Package backends lists every remediation backend in one table. Adding a
// backend is its own package under pkg/repair/backend, one line in Table,
// and the chart's backend enum (a test compares them). The controller and
// kubectl mend take everything engine-specific from here: the backend a
// node is handed to, its pool (Pools) and what to watch for it (Watches).
package backends

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/backend/node"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

// Deps are what the backends read the cluster with.
type Deps struct {
	// Reader reads from the API server, not a cache: targets are looked up
	// once per repair and must be current.
	Reader client.Reader
	// Mapper finds the served version of an engine's kinds.
	Mapper meta.RESTMapper
}

// Table is every backend in the order ownership is tried: the engines
// first, the Node itself (which owns every node) last.
func Table(d Deps) backend.Registry {
	return backend.Registry{
		karpenter.Backend{Reader: d.Reader},
		clusterapi.Backend{Reader: d.Reader, Mapper: d.Mapper},
		node.Backend{},
	}
}

// Pools is the pool resolver of the gate: the configured label first, then
// the backends' own groupings in the table's order.
func Pools(label string) pool.Resolver {
	t := Table(Deps{})
	engines := make([]pool.Engine, len(t))
	for i, b := range t {
		engines[i] = b
	}
	return pool.Resolver{Label: label, Engines: engines}
}

// Watches are the kinds the backends look up to pool nodes, for the
// controller to watch (metadata only) where the cluster serves them.
func Watches() []schema.GroupKind {
	var out []schema.GroupKind
	for _, b := range Table(Deps{}) {
		out = append(out, b.Watches()...)
	}
	return out
}

// Names lists the backends' names, for flags and validation.
func Names() []string { return Table(Deps{}).Names() }

// CheckOverride accepts "" (choose per node) or a backend's name.
func CheckOverride(name string) error { return Table(Deps{}).CheckOverride(name) }
