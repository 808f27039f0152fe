package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testenv"
)

// k8s talks to a real kube-apiserver with the generated NodeRepairPolicy CRD
// installed, so that the CRD's validation (OpenAPI schema and CEL rules) is
// tested as admission runs it, not as we imagine it.
var k8s client.Client

func TestMain(m *testing.M) {
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{CRDPath()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// CRDPath is the generated NodeRepairPolicy CRD.
func CRDPath() string {
	return filepath.Join(testenv.RepoRoot(), "deploy", "crds", "nodemend.dev_noderepairpolicies.yaml")
}
