package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root, from this package's directory.
const repoRoot = "../../.."

// Every agent config the project ships as an example must load: the chart's
// default config, the commented examples next to it and in the systemd
// config, and the YAML blocks of the docs that are agent configs. An unknown
// reason or family name (or any other mistake) in one of them fails here
// rather than stopping a user's agent when they uncomment it.
func TestShippedExampleConfigsLoad(t *testing.T) {
	examples := map[string]string{}

	values := readRepo(t, "deploy/helm/nodemend/values.yaml")
	var chart struct {
		Agent struct {
			Config map[string]any `json:"config"`
		} `json:"agent"`
	}
	if err := yaml.Unmarshal([]byte(values), &chart); err != nil {
		t.Fatal(err)
	}
	def, err := yaml.Marshal(chart.Agent.Config)
	if err != nil {
		t.Fatal(err)
	}
	examples["chart values agent.config"] = string(def)
	// "# Per-reason overrides ..., e.g." followed by "#   Reason: {...}" lines.
	if m := regexp.MustCompile(`(?m)^(\s*)# Per-reason overrides.*\n((?:\s*#\s{3}.*\n)+)`).FindStringSubmatch(values); m != nil {
		examples["chart values reasons example"] = "reasons:\n" + uncomment(m[2], "  ")
	} else {
		t.Error("the chart values lost their commented reasons example; update this test")
	}

	systemd := readRepo(t, "deploy/systemd/agent.yaml")
	_, ex, ok := strings.Cut(systemd, "Example:\n")
	if !ok {
		t.Fatal("deploy/systemd/agent.yaml lost its commented example; update this test")
	}
	examples["deploy/systemd/agent.yaml example"] = uncomment(ex, "")

	for path, blocks := range yamlBlocks(t) {
		for i, b := range blocks {
			if isAgentConfig(b) {
				examples[path+" block "+string(rune('1'+i))] = b
			}
		}
	}
	if len(examples) < 4 {
		t.Fatalf("found only %d examples: %v", len(examples), examples)
	}
	for name, ex := range examples {
		if _, err := Parse([]byte(ex)); err != nil {
			t.Errorf("%s does not load: %v\n%s", name, err, ex)
		}
	}
}

// uncomment strips "#" and one space from each comment line, keeping indent
// before the text.
func uncomment(block, indent string) string {
	var b strings.Builder
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "#") {
			continue
		}
		l = strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ")
		b.WriteString(indent + l + "\n")
	}
	return b.String()
}

// isAgentConfig reports whether a YAML block's top-level keys are all keys
// of the agent config.
func isAgentConfig(block string) bool {
	var top map[string]any
	if yaml.Unmarshal([]byte(block), &top) != nil || len(top) == 0 {
		return false
	}
	for k := range top {
		switch k {
		case "monitors", "reasons", "sources", "exporter", "customRules", "customChecks":
		default:
			return false
		}
	}
	return true
}

// yamlBlocks returns the fenced yaml blocks of every page under docs/ and of
// the README.
func yamlBlocks(t *testing.T) map[string][]string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(repoRoot, "README.md"))
	fence := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	out := map[string][]string{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
			out[p] = append(out[p], m[1])
		}
	}
	return out
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
