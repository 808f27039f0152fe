package collectors

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catAccelerators = "accelerators"

func accelerators(e *Env) []collect.Collector {
	return []collect.Collector{
		commandCollector(e, catAccelerators, "nvidia-smi", "nvidia/nvidia-smi-q.txt", "nvidia-smi", "-q"),
		commandCollector(e, catAccelerators, "nvidia-topology", "nvidia/nvidia-smi-topo.txt", "nvidia-smi", "topo", "-m"),
		{Name: "accelerators/gpu-diagnostic", Category: catAccelerators, Run: e.gpuDiagnostic},
		filesCollector(e, catAccelerators, "nvidia-driver", 0, "proc/driver/nvidia/version", "proc/driver/nvidia/params",
			"proc/driver/nvidia/gpus/*/information", "proc/driver/nvidia/gpus/*/power"),
		{Name: "accelerators/amdgpu", Category: catAccelerators, Run: e.amdgpu},
		commandCollector(e, catAccelerators, "amd-smi", "amd/amd-smi-static.json", "amd-smi", "static", "--json"),
		commandCollector(e, catAccelerators, "neuron-ls", "neuron/neuron-ls.json", "neuron-ls", "--json-output"),
		filesCollector(e, catAccelerators, "neuron-devices", 0, "sys/devices/virtual/neuron_device/*/core_count",
			"sys/devices/virtual/neuron_device/*/connected_devices", "sys/module/neuron/version"),
	}
}

// amdgpuFiles are the sysfs attributes of an amdgpu device worth keeping
// (Documentation/gpu/amdgpu/thermal.rst and driver-misc.rst).
func amdgpuFiles() []string {
	return []string{"vendor", "device", "unique_id", "gpu_busy_percent", "mem_busy_percent", "mem_info_vram_total",
		"mem_info_vram_used", "current_link_speed", "current_link_width", "pp_dpm_sclk", "pp_dpm_mclk", "power_state",
		"ras_features", "ecc_count"}
}

// amdgpu copies the sysfs state of AMD GPUs (PCI vendor 0x1002).
func (e *Env) amdgpu(ctx context.Context, out *collect.Output) error {
	cards, _ := filepath.Glob(e.hostPath("sys/class/drm/card*/device/vendor"))
	found := 0
	for _, v := range cards {
		data, err := os.ReadFile(v)
		if err != nil || strings.TrimSpace(string(data)) != "0x1002" {
			continue
		}
		found++
		dev := filepath.Dir(v)
		rel, _ := filepath.Rel(e.HostRoot, dev)
		for _, f := range amdgpuFiles() {
			if _, err := os.Stat(filepath.Join(dev, f)); err != nil {
				continue
			}
			r := filepath.ToSlash(filepath.Join(rel, f))
			if err := copyHostFile(ctx, out, r, e.hostPath(r), 0); err != nil {
				return err
			}
		}
	}
	if found == 0 {
		return collect.Skip("no AMD GPU")
	}
	return nil
}

// gpuDiagnostic copies the output of the GPU diagnostic the same
// NodeDiagnostic ran (dcgmi diag's JSON).
func (e *Env) gpuDiagnostic(ctx context.Context, out *collect.Output) error {
	if e.GPUDiagnosticFile == "" {
		return collect.Skip("no GPU diagnostic in this NodeDiagnostic")
	}
	return copyHostFile(ctx, out, "nvidia/dcgm-diagnostic.json", e.GPUDiagnosticFile, 0)
}
