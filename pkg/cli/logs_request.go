package cli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/mendclient"
	"nodemend.dev/nodemend/internal/textcut"
)

// managedBy labels the objects kubectl-mend creates.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "kubectl-mend"
)

// obtain reuses a recent completed bundle of the same request still on the
// node, or creates a request.
func (o *logsOptions) obtain(ctx context.Context, c *Clients, prog *Progress, node string) (*v1alpha1.NodeDiagnostic, error) {
	spec := o.spec(node)
	if !o.fresh && !o.uploading() {
		list, err := c.ND.List(ctx, metav1.ListOptions{
			LabelSelector: managedByLabel + "=" + managedBy,
			FieldSelector: fields.OneTermEqualSelector(mendclient.NodeNameField, node).String(),
		})
		if err != nil {
			return nil, Explain(err, "listing nodediagnostics")
		}
		if r := reusable(list.Items, spec, time.Now()); r != nil {
			prog.Update(node, "validating", "reusing nodediagnostic/%s from %s ago", r.Name, time.Since(r.CreationTimestamp.Time).Round(time.Second))
			return r, nil
		}
	}
	obj := &v1alpha1.NodeDiagnostic{
		ObjectMeta: metav1.ObjectMeta{GenerateName: truncate(node, 50) + "-logs-", Labels: map[string]string{managedByLabel: managedBy}},
		Spec:       spec,
	}
	created, err := c.ND.Create(ctx, obj)
	if err != nil {
		if apierrors.IsInvalid(err) {
			return nil, fmt.Errorf("the API server refused the request: %v", apierrors.ReasonForError(err))
		}
		return nil, Explain(err, "creating a nodediagnostic")
	}
	prog.Update(node, "validating", "created nodediagnostic/%s", created.Name)
	return created, nil
}

func (o *logsOptions) spec(node string) v1alpha1.NodeDiagnosticSpec {
	lc := &v1alpha1.LogCaptureSpec{Destination: v1alpha1.DestinationNode}
	if o.uploadURL != "" {
		lc.Destination = o.uploadURL
	}
	if u, ok := o.uploads[node]; ok {
		lc.Destination = u
	}
	for _, c := range o.categories {
		lc.Categories = append(lc.Categories, v1alpha1.LogCategory(c))
	}
	if o.since > 0 {
		lc.Since = &metav1.Duration{Duration: o.since}
	}
	spec := v1alpha1.NodeDiagnosticSpec{NodeName: node, LogCapture: lc}
	if o.gpuLevel > 0 {
		spec.GPUDiagnostic = &v1alpha1.GPUDiagnosticSpec{Level: o.gpuLevel}
	}
	return spec
}

// reusable picks a completed bundle of the same request that is recent and
// stays on the node long enough to be downloaded.
func reusable(items []v1alpha1.NodeDiagnostic, spec v1alpha1.NodeDiagnosticSpec, now time.Time) *v1alpha1.NodeDiagnostic {
	if spec.GPUDiagnostic != nil {
		return nil // a diagnostic is asked for to learn the GPUs' state now
	}
	var best *v1alpha1.NodeDiagnostic
	for i := range items {
		it := &items[i]
		lc, st := it.Spec.LogCapture, it.Status.LogCapture
		if lc == nil || st == nil || st.State != v1alpha1.CaptureCompleted || st.Generation != it.Generation ||
			lc.Destination != v1alpha1.DestinationNode || st.FileName == "" || st.ExpiryTime == nil {
			continue
		}
		if !sameCategories(lc.Categories, spec.LogCapture.Categories) || !sameSince(lc.Since, spec.LogCapture.Since) {
			continue
		}
		if st.ExpiryTime.Time.Before(now.Add(2*time.Minute)) || now.Sub(it.CreationTimestamp.Time) > 5*time.Minute {
			continue
		}
		if best == nil || it.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = it
		}
	}
	return best
}

func sameCategories(a, b []v1alpha1.LogCategory) bool {
	norm := func(cs []v1alpha1.LogCategory) []string {
		if len(cs) == 0 {
			return categoryNames()
		}
		var out []string
		for _, c := range cs {
			out = append(out, string(c))
		}
		sort.Strings(out)
		return out
	}
	x, y := norm(a), norm(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

func sameSince(a, b *metav1.Duration) bool {
	d := func(x *metav1.Duration) time.Duration {
		if x == nil {
			return 0
		}
		return x.Duration
	}
	return d(a) == d(b)
}

// truncate cuts s to at most n bytes on a character boundary (textcut) and
// drops the dots and dashes it then ends in: a generateName prefix must not
// end in them.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimRight(textcut.Head(s, n), ".-")
}
