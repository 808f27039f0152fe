//go:build tools

// Package tools records the generator commands built by the Makefile.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
