package health

import "testing"

// Every reason with a remedy is a Fatal accelerator reason of the registry
// and cites its source; the accelerator reasons of each vendor have one
// (the registry's own validation refuses a remedy without a source).
func TestRemediesAreFatalAcceleratorReasons(t *testing.T) {
	n := 0
	for _, r := range Reasons() {
		if r.Remedy == RemedyNone {
			continue
		}
		n++
		if r.Condition != AcceleratedHardwareReady || r.Severity != Fatal || !r.Remedy.Valid() || r.RemedySource == "" {
			t.Errorf("%s: %+v, want a Fatal AcceleratedHardwareReady reason with a valid remedy and its source", r.Name, r)
		}
	}
	if n < 40 {
		t.Errorf("only %d reasons have a remedy", n)
	}
	for reason, want := range map[string]Remedy{
		ReasonNvidiaXID48Error: RemedyResetGPU, ReasonNvidiaXID79Error: RemedyReboot, ReasonNvidiaXID64Error: RemedyReplaceHardware,
		ReasonDCGMHealthCode125: RemedyResetGPU, ReasonDCGMHealthCode126: RemedyReboot,
		ReasonAMDGPUUncorrectableError: RemedyResetGPU, ReasonNeuronDMAError: RemedyReplaceHardware, "NoSuchReason": RemedyNone,
	} {
		if got := CatalogueRemedy(reason); got != want {
			t.Errorf("CatalogueRemedy(%s) = %q, want %q", reason, got, want)
		}
	}
	if !(RemedyNone.Weight() < RemedyResetGPU.Weight() && RemedyResetGPU.Weight() < RemedyReboot.Weight() && RemedyReboot.Weight() < RemedyReplaceHardware.Weight()) {
		t.Error("remedies are not ordered lightest first")
	}
}
