package config

import (
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

func TestAcceleratorMonitorDefaultsAndOverrides(t *testing.T) {
	c, err := Parse([]byte(`
monitors:
  nvidia:
    expectedCount: 8
    nvmlLibrary: /usr/lib64/libnvidia-ml.so.1
    checkInterval: 10s
  neuron:
    enabled: false
  amdgpu:
    instanceTypeTable: false
    expectedCountLabel: example.com/gpus
`))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Monitors.Section("nvidia").(nvidia.Config)
	if !c.MonitorEnabled("nvidia") || n.ExpectedCount != 8 || n.NVMLLibrary != "/usr/lib64/libnvidia-ml.so.1" ||
		n.CheckInterval.Duration != 10*time.Second || n.ExpectedCountLabel != "nodemend.dev/expected-gpu-count" || !*n.InstanceTypeTable {
		t.Fatalf("nvidia section: %+v", n)
	}
	if c.MonitorEnabled("neuron") || !c.MonitorEnabled("amdgpu") {
		t.Fatal("monitor toggles")
	}
	if a := c.Monitors.Section("amdgpu").(accel.Config); *a.InstanceTypeTable || a.ExpectedCountLabel != "example.com/gpus" || a.CheckInterval.Duration != 30*time.Second {
		t.Fatalf("amdgpu section: %+v", a)
	}
	d := Default()
	for _, m := range []string{"nvidia", "neuron", "amdgpu"} {
		if !d.MonitorEnabled(m) {
			t.Errorf("%s is on by default (it applies only where its hardware is)", m)
		}
	}
}

func TestAcceleratorMonitorRejects(t *testing.T) {
	for yaml, want := range map[string]string{
		"monitors:\n  nvidia:\n    expectedCount: -1\n":       "monitors.nvidia.expectedCount: -1 must not be negative",
		"monitors:\n  neuron:\n    checkInterval: 100ms\n":    "monitors.neuron.checkInterval: 100ms is below the 1s minimum",
		"monitors:\n  amdgpu:\n    nvmlLibrary: /x.so\n":      `unknown field "nvmlLibrary"`,
		"monitors:\n  nvidia:\n    expectedGPUs: 8\n":         `unknown field "expectedGPUs"`,
		"reasons:\n  NvidiaXID13Warning: {severity: Fatal}\n": "may only be lowered from Warning, not raised to Fatal",
	} {
		if _, err := Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want error containing %q, got %v", yaml, want, err)
		}
	}
	if _, err := Parse([]byte("reasons:\n  NvidiaXID79Error: {severity: Warning}\n")); err != nil {
		t.Fatalf("downgrading a Fatal XID is allowed: %v", err)
	}
}
