package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/deploy/deploytest"
	"nodemend.dev/nodemend/pkg/cli"
)

// krewPlugin is the part of krew's Plugin (v1alpha2) the test checks.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

var addURIAndSha = regexp.MustCompile(`\{\{ addURIAndSha "([^"]+)" \.TagName \}\}`)

// renderKrewTemplate does what krew-release-bot does for a tag: the
// version, and each archive's uri and sha256 (here of a stand-in).
func renderKrewTemplate(tmpl, tag string) string {
	out := addURIAndSha.ReplaceAllStringFunc(tmpl, func(m string) string {
		uri := strings.ReplaceAll(addURIAndSha.FindStringSubmatch(m)[1], "{{ .TagName }}", tag)
		return fmt.Sprintf("uri: %s\n      sha256: %x", uri, sha256.Sum256([]byte(uri)))
	})
	return strings.ReplaceAll(out, "{{ .TagName }}", tag)
}

// The krew manifest, rendered for a release, is a valid Plugin for every
// platform kubectl-mend builds on, and describes the CLI's real commands.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deploytest.RepoRoot(), "deploy", "krew", "mend.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := string(data)
	var p krewPlugin
	if err := yaml.UnmarshalStrict([]byte(renderKrewTemplate(tmpl, "v0.1.0")), &p); err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "mend" {
		t.Errorf("header: %s %s %s", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != "v0.1.0" || p.Spec.Homepage == "" || p.Spec.Description == "" {
		t.Errorf("spec: version %q homepage %q", p.Spec.Version, p.Spec.Homepage)
	}
	if n := len(p.Spec.ShortDescription); n == 0 || n > 50 {
		t.Errorf("shortDescription is %d characters; krew-index asks for a short one", n)
	}
	want := map[string]bool{"linux/amd64": true, "linux/arm64": true, "darwin/amd64": true, "darwin/arm64": true, "windows/amd64": true}
	for _, pl := range p.Spec.Platforms {
		osArch := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		if !want[osArch] {
			t.Errorf("unexpected or duplicate platform %s", osArch)
		}
		delete(want, osArch)
		bin := "kubectl-mend"
		if pl.Selector.MatchLabels["os"] == "windows" {
			bin += ".exe"
		}
		if pl.Bin != bin {
			t.Errorf("%s: bin %q, want %q", osArch, pl.Bin, bin)
		}
		if !strings.Contains(pl.URI, "_"+strings.ReplaceAll(osArch, "/", "_")+".") || !strings.Contains(pl.URI, "/v0.1.0/") {
			t.Errorf("%s: uri %s does not name the platform and version", osArch, pl.URI)
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pl.SHA256) {
			t.Errorf("%s: sha256 %q", osArch, pl.SHA256)
		}
	}
	for missing := range want {
		t.Errorf("no platform %s", missing)
	}
	for _, c := range cli.NewRootCommand(cli.StdStreams()).Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !strings.Contains(p.Spec.Description, "kubectl mend "+c.Name()) {
			t.Errorf("the description does not mention kubectl mend %s", c.Name())
		}
	}
}
