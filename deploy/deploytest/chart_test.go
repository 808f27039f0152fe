package deploytest

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/deploy/deploytest/helmrender"
)

// deploy/manifests and the chart's CRDs are what the chart and deploy/crds
// produce now.
func TestPlainManifestsAreCurrent(t *testing.T) {
	const fix = "run `go run ./hack/render-manifests`"
	stale, err := ChartCRDsStale()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Errorf("deploy/helm/nodemend/crds/%s; %s", s, fix)
	}
	want, err := chart.Manifests()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(ManifestsFile())
	if err != nil {
		t.Fatalf("%v; %s", err, fix)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/manifests/nodemend.yaml is stale; %s", fix)
	}
}

// helm lint --strict passes with the defaults and with every feature on.
func TestHelmLint(t *testing.T) {
	for _, v := range []helmrender.Values{{}, allFeatures} {
		if err := chart.Lint(v); err != nil {
			t.Errorf("values %v: %v", v, err)
		}
	}
}

// values.schema.json refuses values the binaries or the API would refuse
// later, with the path of the mistake.
func TestValuesSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"controller.backend=terraform", "/controller/backend"},
		{"controller.recheckInterval=5 minutes", "/controller/recheckInterval"},
		{"controller.replicas=0", "/controller/replicas"},
		{"agent.config.monitors.kernel.checkInterval=soon", "/agent/config/monitors/kernel/checkInterval"},
		{"agent.config.monitors.kernel.enabled=maybe", "/agent/config/monitors/kernel/enabled"},
		{"agent.config.monitors.kernal.enabled=true", "kernal"},
		{"agent.config.reasons.NvidiaXIDError.severity=Critical", "/agent/config/reasons/NvidiaXIDError/severity"},
		{"agent.config.sources.journal.mode=syslog", "/agent/config/sources/journal/mode"},
		{"agent.config.monitors.storage.probeDir=relative/dir", "/agent/config/monitors/storage/probeDir"},
		{"agent.metricsPort=70000", "/agent/metricsPort"},
		{"agent.diagnostics.allowUploadCIDRs[0]=everywhere", "/agent/diagnostics/allowUploadCIDRs/0"},
		{"agnet.enabled=true", "agnet"},
	} {
		_, err := chart.Template(helmrender.Values{Set: []string{c.set}})
		if err == nil {
			t.Errorf("--set %s: rendered, want refused", c.set)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want it to name %s", c.set, err, c.want)
		}
	}
}

// Every rendered document is valid YAML for strict parsers too: no mapping
// key twice (helm and lenient decoders keep the last one silently; kubectl
// and other tools refuse the file).
func TestRenderedYAMLHasNoDuplicateKeys(t *testing.T) {
	for _, v := range []helmrender.Values{{}, allFeatures} {
		out, err := chart.Template(v)
		if err != nil {
			t.Fatalf("helm template %v: %v", v, err)
		}
		for i, doc := range strings.Split(string(out), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			if _, err := yaml.YAMLToJSONStrict([]byte(doc)); err != nil {
				t.Errorf("helm template %v, document %d: %v\n%s", v, i, err, head(doc, 12))
			}
		}
	}
}

func head(s string, lines int) string {
	parts := strings.SplitN(s, "\n", lines+1)
	return strings.Join(parts[:min(len(parts), lines)], "\n")
}
