//go:build tools

// Package tools records the simulation binaries that hack/sim-binaries.sh builds.
package tools

import (
	_ "sigs.k8s.io/karpenter/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
