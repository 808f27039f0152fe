package policy

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// k8s talks to a real kube-apiserver with the generated NodeRepairPolicy CRD
// installed, so that the CRD's validation (OpenAPI schema and CEL rules) is
// tested as admission runs it, not as we imagine it.
var k8s client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{CRDPath()}}, func(env *testenv.Env) error {
		scheme := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			return err
		}
		var err error
		k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
		return err
	})
}

// CRDPath is the generated NodeRepairPolicy CRD.
func CRDPath() string {
	return filepath.Join(testenv.RepoRoot(), "deploy", "crds", "nodemend.dev_noderepairpolicies.yaml")
}
