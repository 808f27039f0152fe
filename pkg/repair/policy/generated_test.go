package policy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// TestGeneratedAPIFilesAreFresh fails when deploy/crds or the deepcopy code
// no longer match api/v1alpha1: someone changed the types without running
// `make generate`. It runs the pinned controller-gen (hack/tools) into a
// temporary directory; the build is cached by Go after the first run.
// It covers every kind of the group, not only NodeRepairPolicy.
func TestGeneratedAPIFilesAreFresh(t *testing.T) {
	root := testenv.RepoRoot()
	tmp := t.TempDir()
	gen := filepath.Join(tmp, "controller-gen")
	build := exec.Command("go", "build", "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen")
	build.Dir = filepath.Join(root, "hack", "tools")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building controller-gen: %v\n%s", err, out)
	}
	crdDir := filepath.Join(tmp, "crds")
	run := exec.Command(gen, "crd:allowDangerousTypes=false", "paths=./api/...", "output:crd:dir="+crdDir)
	run.Dir = root
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen crd: %v\n%s", err, out)
	}
	generated, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("controller-gen wrote no CRDs (%v)", err)
	}
	for _, g := range generated {
		want, _ := os.ReadFile(g)
		committed := filepath.Join(root, "deploy", "crds", filepath.Base(g))
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale or missing: run `make generate`", committed)
		}
	}

	obj := exec.Command(gen, "object", "paths=./api/...", "output:object:stdout")
	obj.Dir = root
	var stdout, stderr bytes.Buffer
	obj.Stdout, obj.Stderr = &stdout, &stderr
	if err := obj.Run(); err != nil {
		t.Fatalf("controller-gen object: %v\n%s", err, stderr.Bytes())
	}
	committed := filepath.Join(root, "api", "v1alpha1", "zz_generated.deepcopy.go")
	got, err := os.ReadFile(committed)
	if err != nil || !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(stdout.Bytes())) {
		t.Errorf("%s is stale: run `make generate`", committed)
	}
}
