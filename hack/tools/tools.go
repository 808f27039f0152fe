//go:build tools

// Package tools records the commands built from this module, apart from the
// main module's dependencies: the generators the Makefile runs
// (controller-gen) and the helm CLI that hack/helm.sh builds for the chart
// tests (deploy/deploytest).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
