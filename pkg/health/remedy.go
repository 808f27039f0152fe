package health

// Remedy is the lightest host action that NVIDIA's XID catalogue (column
// "Resolution Bucket (Immediate Action)", docs/accelerators.md) says
// resolves a fault. The controller's default ladder starts there, and the
// agent clears a fault after a reset only if a reset resolves it.
type Remedy string

const (
	// RemedyNone: no host action is known to resolve the fault; the
	// default ladder starts at Reboot.
	RemedyNone Remedy = ""
	// RemedyResetGPU: a GPU reset (nvidia-smi --gpu-reset) resolves it.
	RemedyResetGPU Remedy = "ResetGPU"
	// RemedyReboot: only a reboot (or a power cycle) does.
	RemedyReboot Remedy = "Reboot"
)

// catalogueRemedies lists the Fatal accelerator reasons by the catalogue's
// resolution. XIDs the catalogue resolves with "GPU reset or reboot" are a
// reset here: the ladder reboots when the reset does not help.
var catalogueRemedies = map[string]Remedy{
	ReasonNvidiaXID46Error:     RemedyResetGPU, // GPU stopped processing
	ReasonNvidiaXID48Error:     RemedyResetGPU, // double-bit ECC: the reset retires the page or remaps the row
	ReasonNvidiaDoubleBitError: RemedyResetGPU, // the same fault, seen through NVML
	ReasonNvidiaXID62Error:     RemedyResetGPU, // micro-controller halt: reset or reboot
	ReasonNvidiaXID74Error:     RemedyResetGPU, // NVLink error: reset, then check the links
	ReasonNvidiaXID95Error:     RemedyResetGPU, // uncontained ECC error
	ReasonNvidiaXID109Error:    RemedyResetGPU, // context switch timeout
	ReasonNvidiaXID110Error:    RemedyResetGPU, // security fault
	ReasonNvidiaXID119Error:    RemedyResetGPU, // GSP RPC timeout
	ReasonNvidiaXID120Error:    RemedyResetGPU, // GSP error
	ReasonNvidiaXID136Error:    RemedyResetGPU, // reset or reboot
	ReasonNvidiaXID140Error:    RemedyResetGPU, // unrecovered ECC error
	ReasonNvidiaXID143Error:    RemedyResetGPU, // initialization failure: reset, replace if it fails
	ReasonNvidiaXID155Error:    RemedyResetGPU, // reset or reboot
	ReasonNvidiaXID156Error:    RemedyResetGPU, // reset or reboot
	ReasonNvidiaXID158Error:    RemedyResetGPU, // reset or reboot
	ReasonNvidiaXID64Error:     RemedyReboot,   // page retirement/row remap failure: reboot
	ReasonNvidiaXID79Error:     RemedyReboot,   // fallen off the bus: reboot, often a power cycle
}

// CatalogueRemedy is the remedy of reason; RemedyNone when the catalogue
// names none (or the reason is not an accelerator fault).
func CatalogueRemedy(reason string) Remedy { return catalogueRemedies[reason] }
