package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// A -trimpath binary (the demo) finds the repository from its working
// directory: the nearest directory up whose go.mod is this module's, not
// another module's (hack/kubebin has its own go.mod).
func TestRepoRootOfATrimpathBinary(t *testing.T) {
	repo := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(repo, "go.mod"), "module nodemend.dev/nodemend\n\ngo 1.26.0\n")
	write(filepath.Join(repo, "hack", "kubebin", "go.mod"), "module nodemend.dev/hack/kubebin\n")
	trimmed := "nodemend.dev/nodemend/internal/testsupport/testenv/testenv.go"
	for _, wd := range []string{repo, filepath.Join(repo, "hack", "kubebin"), filepath.Join(repo, "sim")} {
		if got := repoRoot(trimmed, wd); got != repo {
			t.Errorf("working in %s: %s, want %s", wd, got, repo)
		}
	}
	if got := repoRoot(filepath.Join(repo, "internal", "testsupport", "testenv", "testenv.go"), "/"); got != repo {
		t.Errorf("a full source path: %s, want %s", got, repo)
	}
	if got, want := RepoRoot(), filepath.Clean(filepath.Join("..", "..", "..")); got != mustAbs(t, want) {
		t.Errorf("RepoRoot() = %s, want %s", got, mustAbs(t, want))
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
