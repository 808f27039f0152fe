//go:build tools

// Package tools records the commands built from this module, apart from the
// main module's dependencies: the generators the Makefile runs
// (controller-gen), the helm CLI that hack/helm.sh builds for the real-node
// tier (the chart tests use the Helm library at the same version), and AWS's
// EC2 metadata mock that hack/metadata-mock.sh builds for the cloud metadata
// tests.
package tools

import (
	_ "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock"
	_ "helm.sh/helm/v4/cmd/helm"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
