package hostroot

import (
	"fmt"
	"strings"
)

// Accelerator fixtures. Device nodes are regular files here: the monitors
// only look at their names. Layouts follow the drivers: the NVIDIA driver
// creates /dev/nvidiaN per GPU (N = minor number) plus nvidiactl and
// nvidia-uvm, and /dev/nvidia-nvswitchN on NVSwitch systems; the Neuron driver
// creates /dev/neuronN per device; amdgpu exposes /sys/class/drm/cardN with
// the PCI device's uevent and RAS error counters (drivers/gpu/drm/amd/amdgpu/
// amdgpu_ras.c, "ue: N\nce: N\n" per block), and /dev/kfd for compute.

// WithNvidiaGPUs creates dev/nvidia0..n-1, dev/nvidiactl and dev/nvidia-uvm.
func (r *Root) WithNvidiaGPUs(n int) *Root {
	r.t.Helper()
	for i := range n {
		r.WriteFile(fmt.Sprintf("dev/nvidia%d", i), "")
	}
	r.WriteFile("dev/nvidiactl", "")
	r.WriteFile("dev/nvidia-uvm", "")
	return r
}

// WithNVSwitches creates dev/nvidia-nvswitch0..n-1 (HGX systems).
func (r *Root) WithNVSwitches(n int) *Root {
	r.t.Helper()
	for i := range n {
		r.WriteFile(fmt.Sprintf("dev/nvidia-nvswitch%d", i), "")
	}
	r.WriteFile("dev/nvidia-nvswitchctl", "")
	return r
}

// WithNeuronDevices creates dev/neuron0..n-1.
func (r *Root) WithNeuronDevices(n int) *Root {
	r.t.Helper()
	for i := range n {
		r.WriteFile(fmt.Sprintf("dev/neuron%d", i), "")
	}
	return r
}

// AMDGPU is one amdgpu card of a fixture.
type AMDGPU struct {
	// PCI is the slot name, e.g. "0000:c1:00.0".
	PCI string
	// RAS maps a RAS block ("umc", "gfx", "sdma", "xgmi_wafl", ...) to its
	// uncorrectable and correctable counts.
	RAS map[string][2]uint64
}

// WithAMDGPUs creates sys/class/drm/cardN/device for each GPU (vendor 0x1002,
// DRIVER=amdgpu, RAS counters), a renderD node per card, and dev/kfd.
func (r *Root) WithAMDGPUs(gpus ...AMDGPU) *Root {
	r.t.Helper()
	for i, g := range gpus {
		r.SetAMDGPU(i, g)
		r.WriteFile(fmt.Sprintf("sys/class/drm/renderD%d/dev", 128+i), fmt.Sprintf("226:%d\n", 128+i))
	}
	r.WriteFile("sys/class/drm/version", "drm 1.1.0 20060810\n")
	r.WriteFile("dev/kfd", "")
	return r
}

// SetAMDGPU (re)writes card i.
func (r *Root) SetAMDGPU(i int, g AMDGPU) {
	r.t.Helper()
	dir := fmt.Sprintf("sys/class/drm/card%d/device/", i)
	r.WriteFile(dir+"vendor", "0x1002\n")
	r.WriteFile(dir+"uevent", strings.Join([]string{
		"DRIVER=amdgpu", "PCI_CLASS=38000", "PCI_ID=1002:74A1", "PCI_SUBSYS_ID=1002:74A1",
		"PCI_SLOT_NAME=" + g.PCI, "MODALIAS=pci:v00001002d000074A1sv00001002sd000074A1bc03sc80i00", "",
	}, "\n"))
	r.WriteFile(dir+"ras/features", "feature mask: 0x7ffb\n")
	for block, c := range g.RAS {
		r.WriteFile(dir+"ras/"+block+"_err_count", fmt.Sprintf("ue: %d\nce: %d\n", c[0], c[1]))
	}
}
