// Package coreclient is nodemend-agent's client for the core kinds it
// touches: its Node (read, status patch), the Pods bound to it (list/watch)
// and Events (create, patch, list). It is client-go's REST client with a
// private scheme holding only core/v1: the typed clientset and its scheme
// register every API group client-go knows, which would link all of
// k8s.io/api into a binary that runs on every node of a fleet
// (docs/agent.md#footprint).
package coreclient

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Client reads and writes the agent's core/v1 objects.
type Client struct {
	rc     rest.Interface
	scheme *runtime.Scheme
	params runtime.ParameterCodec
}

// New builds a client from a REST config, which it does not change. The
// agent speaks protobuf where the API server offers it (smaller and
// cheaper to decode than JSON), JSON otherwise.
func New(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("core/v1 scheme: %w", err)
	}
	contentType := runtime.ContentTypeProtobuf
	if cfg.ContentType != "" {
		contentType = cfg.ContentType
	}
	rc, err := RESTClientFor(cfg, corev1.SchemeGroupVersion, "/api", scheme, contentType)
	if err != nil {
		return nil, err
	}
	return &Client{rc: rc, scheme: scheme, params: runtime.NewParameterCodec(scheme)}, nil
}

// RESTClientFor is a REST client of one group version (served under
// apiPath: "/api" for core, "/apis" otherwise) that knows only the kinds of
// scheme, speaking contentType (JSON is accepted too). cfg is not changed.
func RESTClientFor(cfg *rest.Config, gv schema.GroupVersion, apiPath string, scheme *runtime.Scheme, contentType string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.ContentType = contentType
	if contentType != runtime.ContentTypeJSON {
		c.AcceptContentTypes = contentType + "," + runtime.ContentTypeJSON
	}
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// Protobuf returns a copy of cfg that speaks protobuf to the API server,
// accepting JSON where a kind has no protobuf form: for typed clients of
// built-in kinds (client-go's default is JSON), whose lists and watches are
// smaller and cheaper to encode and decode in protobuf.
func Protobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// Scheme is the client's scheme (core/v1 only), for object references.
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// GetNode reads a Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

// PatchNodeStatus patches a Node's status subresource as fieldManager.
func (c *Client) PatchNodeStatus(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rc.Patch(pt).Resource("nodes").Name(name).SubResource("status").
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, c.params).
		Body(data).Do(ctx).Into(out)
	return out, err
}

// PodsOnNode lists and watches the Pods bound to node, filtered by the API
// server (spec.nodeName), for an informer.
func (c *Client) PodsOnNode(node string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.rc, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}

// ListEvents lists the Events of a namespace.
func (c *Client) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	err := c.rc.Get().Namespace(namespace).Resource("events").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// CreateEvent creates an Event in its namespace.
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Into(out)
	return out, err
}

// PatchEvent patches an Event (a repeat: count and last timestamp).
func (c *Client) PatchEvent(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rc.Patch(pt).Namespace(namespace).Resource("events").Name(name).Body(data).Do(ctx).Into(out)
	return out, err
}
