package remediate

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/mendclient"
)

// resource is the NodeRemediations' plural resource name.
const resource = "noderemediations"

// orders reads and writes NodeRemediations: client-go's REST client with a
// private scheme of nodemend's kinds, as the agent's other clients are
// (internal/coreclient, internal/mendclient). The dynamic client would link client-go's
// apply machinery into the agent and convert every object through
// unstructured maps both ways (docs/agent.md#footprint).
type orders struct {
	rc rest.Interface
}

func newOrders(cfg *rest.Config) (*orders, error) {
	rc, err := mendclient.RESTClient(cfg)
	if err != nil {
		return nil, err
	}
	return &orders{rc: rc}, nil
}

// forNode lists and watches the orders of one node, filtered by the API
// server on the selectable field spec.nodeName.
func (o *orders) forNode(node string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(o.rc, resource, metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}

func (o *orders) get(ctx context.Context, name string) (*v1alpha1.NodeRemediation, error) {
	out := &v1alpha1.NodeRemediation{}
	err := o.rc.Get().Resource(resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// updateStatus writes obj's status (optimistic concurrency on its
// resourceVersion).
func (o *orders) updateStatus(ctx context.Context, obj *v1alpha1.NodeRemediation) (*v1alpha1.NodeRemediation, error) {
	out := &v1alpha1.NodeRemediation{}
	err := o.rc.Put().Resource(resource).Name(obj.Name).SubResource("status").Body(obj).Do(ctx).Into(out)
	return out, err
}
