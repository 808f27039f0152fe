package config

import (
	"testing"

	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/monitors/containerruntime"
)

// SectionOf reads a monitor's section by its type; a type two monitors
// share (neuron's and amdgpu's accel.Config) names neither.
func TestSectionOf(t *testing.T) {
	c, err := Parse([]byte(`
monitors:
  containerRuntime:
    criSocket: /run/k3s/containerd/containerd.sock
`))
	if err != nil {
		t.Fatal(err)
	}
	cr, ok := SectionOf[containerruntime.Config](c.Monitors)
	if !ok || cr.CRISocket != "/run/k3s/containerd/containerd.sock" {
		t.Errorf("SectionOf[containerruntime.Config] = %+v, %v", cr, ok)
	}
	if _, ok := SectionOf[accel.Config](c.Monitors); ok {
		t.Error("SectionOf[accel.Config] found one section of a type two monitors share")
	}
}
