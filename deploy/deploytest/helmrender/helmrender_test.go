package helmrender

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var tiny = Release{Chart: filepath.Join("testdata", "tiny"), Name: "rel", Namespace: "ns"}

// The output is helm template's: manifests first, then hooks, each under
// its "# Source:" line, with the release's name and namespace.
func TestTemplateIsHelmTemplate(t *testing.T) {
	out, err := tiny.Template(Values{Set: []string{"replicas=3"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "---\n# Source: tiny/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rel\n  namespace: ns\n" +
		"data:\n  replicas: \"3\"\n---\n# Source: tiny/templates/hook.yaml\napiVersion: v1\nkind: Pod\nmetadata:\n  name: rel-test\n"
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("rendered:\n%s\nwant it to begin with:\n%s", out, want)
	}
}

// Values files merge before --set values, and values.schema.json refuses
// what it does not allow, naming the path.
func TestValuesMergeAndSchema(t *testing.T) {
	file := filepath.Join(t.TempDir(), "v.yaml")
	if err := os.WriteFile(file, []byte("replicas: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := tiny.Template(Values{Files: []string{file}})
	if err != nil || !strings.Contains(string(out), `replicas: "2"`) {
		t.Errorf("values file: %v\n%s", err, out)
	}
	out, err = tiny.Template(Values{Files: []string{file}, Set: []string{"replicas=5"}})
	if err != nil || !strings.Contains(string(out), `replicas: "5"`) {
		t.Errorf("--set after the file: %v\n%s", err, out)
	}
	for set, path := range map[string]string{"replicas=0": "/replicas", "replica=2": "replica"} {
		if _, err := tiny.Template(Values{Set: []string{set}}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("--set %s: %v, want a refusal naming %s", set, err, path)
		}
	}
}

// Lint is --strict: the schema's refusal fails it, and so does a warning.
func TestLintStrict(t *testing.T) {
	if err := tiny.Lint(Values{}); err != nil {
		t.Errorf("the tiny chart: %v", err)
	}
	if err := tiny.Lint(Values{Set: []string{"replicas=0"}}); err == nil {
		t.Error("replicas=0: lint passed, want the schema's refusal")
	}
	// An unknown key in Chart.yaml draws a warning (not an error): strict
	// fails on it.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(tiny.Chart)); err != nil {
		t.Fatal(err)
	}
	chartYAML := filepath.Join(dir, "Chart.yaml")
	data, err := os.ReadFile(chartYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chartYAML, append(data, "colour: blue\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	odd := Release{Chart: dir, Name: "rel", Namespace: "ns"}
	if err := odd.Lint(Values{}); err == nil || !strings.Contains(err.Error(), "WARNING") {
		t.Errorf("an unknown key in Chart.yaml: %v, want a strict failure on the warning", err)
	}
}

// The helm CLI that the real-node tier installs the chart with
// (hack/helm.sh, pinned in hack/tools/go.mod) is the version these renders
// come from (go.mod), so that the chart a node gets is the chart tested.
func TestHelmCLIPinIsTheLibrary(t *testing.T) {
	lib := requirement(t, filepath.Join("..", "..", "..", "go.mod"), "helm.sh/helm/v4")
	cli := requirement(t, filepath.Join("..", "..", "..", "hack", "tools", "go.mod"), "helm.sh/helm/v4")
	if lib == "" || lib != cli {
		t.Errorf("helm library %q (go.mod), helm CLI %q (hack/tools/go.mod): pin them together", lib, cli)
	}
}

// requirement is the version a go.mod file requires of module.
func requirement(t *testing.T, gomod, module string) string {
	t.Helper()
	f, err := os.Open(gomod)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1]
		}
	}
	return ""
}
