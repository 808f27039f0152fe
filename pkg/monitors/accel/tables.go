package accel

// Built-in instance type → device count tables, from the cloud providers'
// published instance specifications. They only fill in when neither the
// config nor a node label gives the count; an operator can always override.
// Types not listed mean "unknown", never zero.

// NvidiaGPUs maps EC2 (and a few other clouds') instance types to their
// NVIDIA GPU count.
func NvidiaGPUs() map[string]int {
	t := map[string]int{
		"p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
		"p4d.24xlarge": 8, "p4de.24xlarge": 8,
		"p5.4xlarge": 1, "p5.48xlarge": 8, "p5e.48xlarge": 8, "p5en.48xlarge": 8,
		"p6-b200.48xlarge": 8, "p6e-gb200.36xlarge": 4,
		"g4dn.12xlarge": 4, "g4dn.metal": 8,
		"g5.12xlarge": 4, "g5.24xlarge": 4, "g5.48xlarge": 8,
		"g6.12xlarge": 4, "g6.24xlarge": 4, "g6.48xlarge": 8,
		"g6e.12xlarge": 4, "g6e.24xlarge": 4, "g6e.48xlarge": 8,
		"g5g.16xlarge": 2, "g5g.metal": 2,
		"Standard_ND96asr_v4": 8, "Standard_ND96amsr_A100_v4": 8, "Standard_ND96isr_H100_v5": 8,
		"a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8, "a3-highgpu-8g": 8,
	}
	// Single-GPU sizes of the g families.
	for _, fam := range []string{"g4dn", "g5", "g6", "g6e"} {
		for _, size := range []string{"xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge"} {
			t[fam+"."+size] = 1
		}
	}
	for _, size := range []string{"xlarge", "2xlarge", "4xlarge", "8xlarge"} {
		t["g5g."+size] = 1
	}
	return t
}

// NeuronDevices maps EC2 Inferentia and Trainium instance types to their
// Neuron device count (/dev/neuronN entries).
func NeuronDevices() map[string]int {
	return map[string]int{
		"inf1.xlarge": 1, "inf1.2xlarge": 1, "inf1.6xlarge": 4, "inf1.24xlarge": 16,
		"inf2.xlarge": 1, "inf2.8xlarge": 1, "inf2.24xlarge": 6, "inf2.48xlarge": 12,
		"trn1.2xlarge": 1, "trn1.32xlarge": 16, "trn1n.32xlarge": 16,
		"trn2.48xlarge": 16, "trn2u.48xlarge": 16,
	}
}

// AMDGPUs maps instance types to their AMD GPU count.
func AMDGPUs() map[string]int {
	return map[string]int{
		"g4ad.xlarge": 1, "g4ad.2xlarge": 1, "g4ad.4xlarge": 1, "g4ad.8xlarge": 2, "g4ad.16xlarge": 4,
		"Standard_ND96isr_MI300X_v5": 8,
	}
}
