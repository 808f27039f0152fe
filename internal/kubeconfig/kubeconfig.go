// Package kubeconfig loads the API client configuration of nodemend's
// binaries: an explicit --kubeconfig file, or the in-cluster config.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load reads path, or the in-cluster config when path is empty; unlike
// clientcmd's own fallback it fails with a clear message outside a cluster
// instead of trying localhost.
func Load(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}
