package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
	"nodemend.dev/nodemend/pkg/monitors/nvidia/dcgm"
)

func TestDCGMDefaultsAndOverrides(t *testing.T) {
	d := Default().Monitors.Section("nvidia").(nvidia.Config).DCGM
	if d.Mode != dcgm.Auto || d.Dcgmi != "dcgmi" || d.DcgmiFrom != dcgm.FromAuto || d.HostEngine != "" || d.CheckInterval.Duration != time.Minute {
		t.Fatalf("defaults: %+v", d)
	}
	c, err := Parse([]byte(`
monitors:
  nvidia:
    dcgm:
      mode: required
      dcgmi: /opt/dcgm/bin/dcgmi
      dcgmiFrom: host
      hostEngine: unix:///run/nvidia-dcgm/nv-hostengine.sock
      checkInterval: 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Monitors.Section("nvidia").(nvidia.Config).DCGM
	if g.Mode != dcgm.Required || g.Dcgmi != "/opt/dcgm/bin/dcgmi" || g.DcgmiFrom != dcgm.FromHost || g.HostEngine != "unix:///run/nvidia-dcgm/nv-hostengine.sock" || g.CheckInterval.Duration != 2*time.Minute {
		t.Fatalf("overrides: %+v", g)
	}
	for _, h := range []string{"10.0.0.7", "nvidia-dcgm.gpu-operator.svc:5555", "[fd00::1]:5555"} {
		if _, err := Parse([]byte("monitors:\n  nvidia:\n    dcgm:\n      hostEngine: \"" + h + "\"\n")); err != nil {
			t.Errorf("hostEngine %q: %v", h, err)
		}
	}
}

func TestDCGMRejects(t *testing.T) {
	for yaml, want := range map[string]string{
		"monitors:\n  nvidia:\n    dcgm:\n      mode: sometimes\n":          `monitors.nvidia.dcgm.mode: "sometimes" is not auto, required or off`,
		"monitors:\n  nvidia:\n    dcgm:\n      dcgmi: bin/dcgmi\n":         "must be a command name or an absolute path",
		"monitors:\n  nvidia:\n    dcgm:\n      dcgmiFrom: image\n":         `monitors.nvidia.dcgm.dcgmiFrom: "image" is not auto, agent or host`,
		"monitors:\n  nvidia:\n    dcgm:\n      dcgmi: --help\n":            "must be a command name or an absolute path",
		"monitors:\n  nvidia:\n    dcgm:\n      hostEngine: --version\n":    "is not host, host:port or unix:///path",
		"monitors:\n  nvidia:\n    dcgm:\n      hostEngine: \"a b:5555\"\n": "is not host, host:port or unix:///path",
		"monitors:\n  nvidia:\n    dcgm:\n      hostEngine: unix://sock\n":  "unix:// followed by an absolute socket path",
		"monitors:\n  nvidia:\n    dcgm:\n      checkInterval: 10ms\n":      "monitors.nvidia.dcgm.checkInterval: 10ms is below the 1s minimum",
		"monitors:\n  nvidia:\n    dcgm:\n      diagnostics: true\n":        `unknown field "diagnostics"`,
		"reasons:\n  DCGMHealthCode3: {severity: Fatal}\n":                  "may only be lowered from Warning, not raised to Fatal",
		"reasons:\n  DCGMHealthCode999: {disabled: true}\n":                 "unknown reason",
	} {
		if _, err := Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want error containing %q, got %v", yaml, want, err)
		}
	}
	if _, err := Parse([]byte("reasons:\n  DCGMHealthCode4: {severity: Warning}\n  DCGMError: {disabled: true}\n")); err != nil {
		t.Fatalf("lowering and disabling DCGM reasons is allowed: %v", err)
	}
}

// The DCGM families work in overrides like the XID ones: a family's override
// applies to every member, a member's own takes precedence.
func TestDCGMFamilyOverrides(t *testing.T) {
	c, err := Parse([]byte(`
reasons:
  DCGMHealthCodeFatal: {severity: Warning}
  DCGMHealthCode120: {severity: Info}
  DCGMFieldError: {disabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"DCGMHealthCode4": "Warning", "DCGMHealthCode120": "Info", "DCGMHealthCode3": "Warning", "DCGMError": "Fatal"} {
		if r, on := c.Effective(name); !on || string(r.Severity) != want {
			t.Errorf("%s: %s (on %v), want %s", name, r.Severity, on, want)
		}
	}
	if _, on := c.Effective("DCGMFieldError112"); on {
		t.Error("DCGMFieldError112 still on")
	}
	c, err = Parse([]byte("reasons:\n  DCGMHealthCode: {disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DCGMHealthCode1", "DCGMHealthCode71", "DCGMHealthCode132"} {
		if _, on := c.Effective(name); on {
			t.Errorf("%s still on", name)
		}
	}
	if _, on := c.Effective("DCGMError"); !on {
		t.Error("DCGMError is no health code")
	}
	if _, err := Parse([]byte("reasons:\n  DCGMHealthCode: {severity: Fatal}\n")); err == nil || !strings.Contains(err.Error(), "may only be lowered") {
		t.Errorf("raising the Warning members through the family: %v", err)
	}
}

// docs/agent-config.md shows the DCGM defaults.
func TestDocumentedDCGMDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/agent-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "```yaml\n")
	block, _, _ := strings.Cut(rest, "```")
	c, err := Parse([]byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Monitors.Section("nvidia").(nvidia.Config).DCGM, Default().Monitors.Section("nvidia").(nvidia.Config).DCGM; got != want {
		t.Fatalf("documented %+v, defaults %+v", got, want)
	}
	if !strings.Contains(block, "dcgm:") {
		t.Fatal("the example does not show the dcgm section")
	}
}
