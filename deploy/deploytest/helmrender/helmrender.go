// Package helmrender renders and lints a Helm chart with the Helm library
// (helm.sh/helm/v4, pinned in go.mod), as `helm template --include-crds` and
// `helm lint --strict` do. The chart tests (deploy/deploytest) and
// hack/render-manifests use it, so that `make test` needs no helm CLI built
// from source (on a cold first run that build compiled Kubernetes' client
// libraries a second time, with other flags, for minutes); the real-node
// tier still installs the chart with the helm CLI, as a user does
// (hack/helm.sh, the same version: a test keeps the pins together).
//
// It renders with the library's own steps of a client-only install —
// chart loader, values coalescing with the chart's JSON schema, template
// engine, manifest sorting in install order — but not through
// pkg/action: that package links Helm's Kubernetes client, whose kustomize
// imports the standard library's plugin package, and a binary that imports
// plugin is linked to bind every C symbol at start; the test binaries that
// also link go-nvml (which leaves libnvidia-ml's symbols to be found when
// first called) would then not start on machines without the NVIDIA driver.
// TestPlainManifestsAreCurrent compares the output with the committed
// manifests, first rendered by the helm CLI.
//
// It is its own package so that only what renders the chart links Helm;
// packages that import deploytest for its other helpers do not.
package helmrender

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	valuesutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
)

// Release is a chart directory rendered as one named release.
type Release struct {
	Chart     string // the chart's directory
	Name      string // .Release.Name
	Namespace string // .Release.Namespace
	// KubeVersion is .Capabilities.KubeVersion, as helm template's
	// --kube-version: the cluster the render is for. Empty is helm's
	// default, which in a program is the Kubernetes release of the
	// client-go it links (what the helm CLI assumes) but in a test binary
	// Helm's fixed v1.20.0, older than the chart allows: tests set it to
	// their API server's version.
	KubeVersion string
}

// Values are what the chart is rendered with, as helm's flags take them:
// Files as --values (merged in order), then Set as --set.
type Values struct {
	Files []string
	Set   []string
}

// merge coalesces the values as helm's CLI does (pkg/cli/values): each
// file merged over the last, then each --set parsed into the result.
func (v Values) merge() (map[string]any, error) {
	base := map[string]any{}
	for _, f := range v.Files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m, err := loader.LoadValues(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", f, err)
		}
		base = loader.MergeMaps(base, m)
	}
	for _, s := range v.Set {
		if err := strvals.ParseInto(s, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	return base, nil
}

// Template renders the chart with its CRDs, byte for byte as
// `helm template NAME CHART --namespace NS --include-crds` prints it: CRDs,
// manifests in install order, then hooks. Values the chart's
// values.schema.json refuses are an error naming the path of the mistake.
func (r Release) Template(v Values) ([]byte, error) {
	vals, err := v.merge()
	if err != nil {
		return nil, err
	}
	chrt, err := loader.Load(r.Chart)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependencies(chrt, vals); err != nil {
		return nil, err
	}
	// helm template's capabilities: the library's defaults, no cluster.
	caps := common.DefaultCapabilities.Copy()
	if r.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(r.KubeVersion)
		if err != nil {
			return nil, err
		}
		caps.KubeVersion = *kv
	}
	if k := chrt.Metadata.KubeVersion; k != "" && !chartutil.IsCompatibleRange(k, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", k, caps.KubeVersion.Version)
	}
	opts := common.ReleaseOptions{Name: r.Name, Namespace: r.Namespace, Revision: 1, IsInstall: true}
	top, err := valuesutil.ToRenderValuesWithSchemaValidation(chrt, vals, opts, caps, false)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", r.Chart, err)
	}
	var e engine.Engine
	files, err := e.RenderWithContext(context.Background(), chrt, top)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", r.Chart, err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", r.Chart, err)
	}
	// pkg/action's manifest (CRDs, then the sorted manifests), then each
	// hook, as pkg/cmd/template.go prints them.
	var m bytes.Buffer
	for _, crd := range chrt.CRDObjects() {
		fmt.Fprintf(&m, "---\n# Source: %s\n%s\n", crd.Filename, string(crd.File.Data))
	}
	for _, mf := range manifests {
		fmt.Fprintf(&m, "---\n# Source: %s\n%s\n", mf.Name, mf.Content)
	}
	var out bytes.Buffer
	fmt.Fprintln(&out, strings.TrimSpace(m.String()))
	for _, h := range hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.Bytes(), nil
}

// Lint is `helm lint --strict` (pkg/action's Lint without its action
// wrapper): any warning or error fails it, and the error lists them.
func (r Release) Lint(v Values) error {
	vals, err := v.merge()
	if err != nil {
		return err
	}
	// pkg/action's guard: a directory without Chart.yaml is not a chart.
	if _, err := os.Stat(filepath.Join(r.Chart, "Chart.yaml")); err != nil {
		return fmt.Errorf("unable to check Chart.yaml file in chart: %w", err)
	}
	var opts []lint.LinterOption
	if r.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(r.KubeVersion)
		if err != nil {
			return err
		}
		opts = append(opts, lint.WithKubeVersion(kv))
	}
	l := lint.RunAll(r.Chart, vals, r.Namespace, opts...)
	var msgs []string
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			msgs = append(msgs, m.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("helm lint --strict %s:\n%s", path.Base(r.Chart), strings.Join(msgs, "\n"))
}

// ManifestValues are the --set values the plain manifests are rendered
// with: the chart's defaults, plus the Namespace with its Pod Security
// labels (kubectl users have no --create-namespace).
var ManifestValues = []string{"namespace.create=true"}

// Manifests renders the plain manifests (deploy/manifests/nodemend.yaml).
func (r Release) Manifests() ([]byte, error) {
	out, err := r.Template(Values{Set: ManifestValues})
	if err != nil {
		return nil, err
	}
	header := "# Generated by `go run ./hack/render-manifests` from deploy/helm/nodemend with its default\n" +
		"# values (and the Namespace). Do not edit; install with:\n" +
		"#   kubectl apply --server-side -f deploy/manifests/nodemend.yaml\n"
	return append([]byte(header), out...), nil
}
