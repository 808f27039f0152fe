package health

// Remedy is the lightest host action that the vendor's own catalogue says
// resolves a fault: NVIDIA's XID catalogue (column "Resolution Bucket
// (Immediate Action)"), DCGM's error table (dcgm_errors.h: each code's
// priority and suggested next step), the amdgpu driver's RAS documentation,
// AWS Neuron's node problem detector. Each reason's remedy and its source
// are in reasons.yaml (docs/accelerators.md, "Remedy per reason"). The
// controller's default ladder starts there, and the agent clears a fault
// after a GPU reset only if a reset resolves it.
type Remedy string

const (
	// RemedyNone: no vendor catalogue names a host action for the fault;
	// the default ladder starts at Reboot.
	RemedyNone Remedy = ""
	// RemedyResetGPU: a GPU reset (nvidia-smi --gpu-reset, amd-smi reset)
	// resolves it; a reboot when the reset does not.
	RemedyResetGPU Remedy = "ResetGPU"
	// RemedyReboot: a reboot (or a power cycle) does; a GPU reset does not.
	RemedyReboot Remedy = "Reboot"
	// RemedyReplaceHardware: no host action does: the vendor sends a person
	// (field diagnostics, re-seating, an RMA). A node no engine owns goes
	// straight to Quarantine; an engine replaces its node as for any fault.
	RemedyReplaceHardware Remedy = "ReplaceHardware"
)

// Remedies are the remedies a reason may name, lightest first.
func Remedies() []Remedy {
	return []Remedy{RemedyResetGPU, RemedyReboot, RemedyReplaceHardware}
}

// Valid reports whether r is a remedy a reason may name (not RemedyNone).
func (r Remedy) Valid() bool { return r.Weight() > 0 }

// Weight orders remedies from none (0) to ReplaceHardware: of two faults
// on one condition, the heavier remedy is the one a repair must start
// with, since the lighter action would leave the other fault standing.
func (r Remedy) Weight() int {
	switch r {
	case RemedyResetGPU:
		return 1
	case RemedyReboot:
		return 2
	case RemedyReplaceHardware:
		return 3
	}
	return 0
}

// CatalogueRemedy is the remedy of reason; RemedyNone when the registry
// names none (or the reason is unknown).
func CatalogueRemedy(reason string) Remedy {
	r, _ := LookupReason(reason)
	return r.Remedy
}
