// Package mendclient is the client of nodemend.dev's API group: a small typed
// client for NodeDiagnostics (the agent and kubectl-mend) and the REST client
// the agent's NodeRemediation runner reads and writes its orders with. No
// code generator, no controller-runtime manager in the agent.
package mendclient

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
)

// Resource is the plural resource name.
const Resource = "nodediagnostics"

// NodeNameField is the selectable field the agent filters on.
const NodeNameField = "spec.nodeName"

// Client reads and writes NodeDiagnostics.
type Client struct {
	rc rest.Interface
}

// New builds a client from a REST config (which it does not change).
func New(cfg *rest.Config) (*Client, error) {
	rc, err := RESTClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{rc: rc}, nil
}

// RESTClient is client-go's REST client for nodemend's API group, with a
// private scheme of its kinds only (no typed clientset, no dynamic client:
// docs/agent.md#footprint). The agent's clients of nodemend's kinds share it.
func RESTClient(cfg *rest.Config) (rest.Interface, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// Custom resources are served as JSON only.
	return coreclient.RESTClientFor(cfg, v1alpha1.GroupVersion, "/apis", scheme, runtime.ContentTypeJSON)
}

// Get reads one object.
func (c *Client) Get(ctx context.Context, name string) (*v1alpha1.NodeDiagnostic, error) {
	out := &v1alpha1.NodeDiagnostic{}
	err := c.rc.Get().Resource(Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List lists objects.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeDiagnosticList, error) {
	out := &v1alpha1.NodeDiagnosticList{}
	err := c.rc.Get().Resource(Resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Create creates an object.
func (c *Client) Create(ctx context.Context, obj *v1alpha1.NodeDiagnostic) (*v1alpha1.NodeDiagnostic, error) {
	out := &v1alpha1.NodeDiagnostic{}
	err := c.rc.Post().Resource(Resource).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes an object.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.rc.Delete().Resource(Resource).Name(name).Do(ctx).Error()
}

// UpdateStatus writes obj's status (optimistic concurrency on its
// resourceVersion).
func (c *Client) UpdateStatus(ctx context.Context, obj *v1alpha1.NodeDiagnostic) (*v1alpha1.NodeDiagnostic, error) {
	out := &v1alpha1.NodeDiagnostic{}
	err := c.rc.Put().Resource(Resource).Name(obj.Name).SubResource("status").Body(obj).Do(ctx).Into(out)
	return out, err
}

// ListWatchForNode lists and watches the objects of one node only, filtered
// by the API server on the selectable field spec.nodeName.
func (c *Client) ListWatchForNode(node string) *cache.ListWatch {
	return cache.NewListWatchFromClient(c.rc, Resource, metav1.NamespaceAll, fields.OneTermEqualSelector(NodeNameField, node))
}

// Update writes obj's spec and metadata.
func (c *Client) Update(ctx context.Context, obj *v1alpha1.NodeDiagnostic) (*v1alpha1.NodeDiagnostic, error) {
	out := &v1alpha1.NodeDiagnostic{}
	err := c.rc.Put().Resource(Resource).Name(obj.Name).Body(obj).Do(ctx).Into(out)
	return out, err
}
