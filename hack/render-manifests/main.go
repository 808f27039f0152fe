// Command render-manifests regenerates what is derived from the Helm chart
// and the generated CRDs: deploy/manifests/nodemend.yaml (the chart rendered
// with its defaults) and the chart's copy of the CRDs
// (deploy/helm/nodemend/crds, from deploy/crds, which `make generate`
// writes). deploy/deploytest fails while either is stale.
//
//	go run ./hack/render-manifests
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"nodemend.dev/nodemend/deploy/deploytest"
	"nodemend.dev/nodemend/deploy/deploytest/helmrender"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "render-manifests:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := deploytest.SyncChartCRDs(); err != nil {
		return err
	}
	chart := helmrender.Release{Chart: deploytest.ChartDir(), Name: deploytest.ReleaseName, Namespace: deploytest.Namespace}
	out, err := chart.Manifests()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(deploytest.ManifestsFile()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(deploytest.ManifestsFile(), out, 0o644)
}
