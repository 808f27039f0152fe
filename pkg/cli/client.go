package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/mendclient"
)

// Global holds the kubeconfig flags every command shares (--kubeconfig,
// --context, --as, --request-timeout, ... as kubectl has them).
type Global struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	// color is --color: auto, always or never.
	color string
}

func (g *Global) bind(root *cobra.Command) {
	fl := root.PersistentFlags()
	fl.StringVar(&g.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file")
	clientcmd.BindOverrideFlags(&g.overrides, fl, clientcmd.RecommendedConfigOverrideFlags(""))
	fl.StringVar(&g.color, "color", string(ColorAuto), "colour the output: auto (when stdout is a terminal and NO_COLOR is unset), always or never")
}

// Palette is the colour palette for writing to w under --color.
func (g *Global) Palette(w io.Writer) Palette { return PaletteFor(w, ColorMode(g.color)) }

// Clients are the API clients of one invocation.
type Clients struct {
	Config *rest.Config
	Core   kubernetes.Interface
	ND     *mendclient.Client
	// Bulk is Core speaking protobuf, for the large lists of status and
	// explain (thousands of Nodes, Pods, Events): several times less to
	// decode than JSON.
	Bulk kubernetes.Interface
	// Dynamic reads the engines' objects (NodeClaim, NodePool, Machine)
	// and NodeRepairPolicies as unstructured: their Go types are not
	// imported.
	Dynamic dynamic.Interface
	// Metadata lists objects whose metadata is all that is needed (Cluster
	// API Machines for pool lookups).
	Metadata metadata.Interface
}

// Namespace is -n, else the kubeconfig context's namespace, else "default".
func (g *Global) Namespace() (string, bool, error) {
	ns, explicit, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(g.loading, &g.overrides).Namespace()
	if err != nil {
		return "", false, fmt.Errorf("kubeconfig: %w", err)
	}
	return ns, explicit, nil
}

// Clients builds the clients from the flags.
func (g *Global) Clients() (*Clients, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(g.loading, &g.overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-mend"
	cfg.QPS, cfg.Burst = 20, 40
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	nd, err := mendclient.New(cfg)
	if err != nil {
		return nil, err
	}
	bulk, err := kubernetes.NewForConfig(coreclient.Protobuf(cfg))
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: cfg, Core: core, ND: nd, Bulk: bulk, Dynamic: dyn, Metadata: meta}, nil
}

// ErrCRDMissing means nodemend's CRDs are not installed.
var ErrCRDMissing = errors.New("the NodeDiagnostic CRD (nodediagnostics.nodemend.dev) is not installed in this cluster; install nodemend (deploy/crds) first")

// NodeDiagnosticClients connects, checks that the NodeDiagnostic CRD is
// installed and that the caller may do what need lists: what every command
// that requests work from an agent checks before it starts.
func (g *Global) NodeDiagnosticClients(ctx context.Context, need ...Access) (*Clients, error) {
	c, err := g.Clients()
	if err != nil {
		return nil, err
	}
	if err := c.CheckCRD(); err != nil {
		return nil, err
	}
	if err := c.CheckAccess(ctx, need...); err != nil {
		return nil, err
	}
	return c, nil
}

// CheckCRD verifies that the API server serves NodeDiagnostics.
func (c *Clients) CheckCRD() error {
	_, err := c.Core.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return ErrCRDMissing
	}
	if err != nil {
		return fmt.Errorf("asking the API server for %s: %w", v1alpha1.GroupVersion, err)
	}
	return nil
}

// Access is one permission a command needs, and why.
type Access struct {
	Verb, Group, Resource, Subresource, Name string
	Why                                      string
}

func (a Access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	return a.Verb + " " + r
}

// CheckAccess asks the API server (SelfSubjectAccessReview) whether the
// caller has every permission, and names the ones missing.
func (c *Clients) CheckAccess(ctx context.Context, need ...Access) error {
	var missing []string
	for _, a := range need {
		r, err := c.Core.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking RBAC: %w", err)
		}
		if !r.Status.Allowed {
			missing = append(missing, fmt.Sprintf("%s (%s)", a, a.Why))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("RBAC: you are not allowed to %s", strings.Join(missing, ", nor "))
	}
	return nil
}

// Explain turns an API error into advice for the resource it concerned.
func Explain(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("RBAC: %s: %v", what, apierrors.ReasonForError(err))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: timed out", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
