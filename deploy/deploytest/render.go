// Package deploytest holds the tests that install the Helm chart
// (deploy/helm/nodemend), rendered by package helmrender with the Helm
// library, into a real API server, and the helpers they share with the
// image and manifest checks elsewhere.
package deploytest

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Release name and namespace of the plain manifests (and of the tests):
// helmrender.Release{Chart: ChartDir(), Name: ReleaseName, Namespace: Namespace}
// renders them. (This package does not build that value itself, so that the
// packages importing it for its other helpers do not link Helm.)
const (
	ReleaseName = "nodemend"
	Namespace   = "nodemend-system"
)

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ChartDir is the chart's directory.
func ChartDir() string { return filepath.Join(RepoRoot(), "deploy", "helm", "nodemend") }

// ManifestsFile is the rendered plain manifest file.
func ManifestsFile() string { return filepath.Join(RepoRoot(), "deploy", "manifests", "nodemend.yaml") }

// Objects splits a multi-document YAML stream into objects, skipping empty
// documents.
func Objects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
}

// Find returns the object of the given kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}
