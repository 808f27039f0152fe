package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply manager of ApplyAll.
const FieldManager = "nodemend-install-test"

// Key names an object in ApplyAll's result.
func Key(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + " " + ns + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}

// ApplyAll installs objs the way `kubectl apply --server-side` would: CRDs
// first (waiting until they are established), then Namespaces, then the
// rest. It returns each object's apply error (nil: accepted), keyed by Key;
// the error is for what stopped the install as a whole.
func ApplyAll(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) (map[string]error, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	results := map[string]error{}
	apply := func(o *unstructured.Unstructured) error {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("no API for %s: %w", gvk, err)
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		force := true
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
		return err
	}
	phases := []func(*unstructured.Unstructured) bool{
		func(o *unstructured.Unstructured) bool { return o.GetKind() == "CustomResourceDefinition" },
		func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" },
		func(*unstructured.Unstructured) bool { return true },
	}
	done := map[*unstructured.Unstructured]bool{}
	for i, in := range phases {
		var crds []string
		for _, o := range objs {
			if done[o] || !in(o) {
				continue
			}
			done[o] = true
			results[Key(o)] = apply(o)
			if o.GetKind() == "CustomResourceDefinition" && results[Key(o)] == nil {
				crds = append(crds, o.GetName())
			}
		}
		if err := waitEstablished(ctx, dyn, crds); err != nil {
			return results, err
		}
		if i == 0 {
			mapper.Reset() // the new resources
		}
	}
	return results, nil
}

var crdResource = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

func waitEstablished(ctx context.Context, dyn dynamic.Interface, names []string) error {
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", name, err)
		}
	}
	return nil
}
