package exporter

import (
	"slices"
	"strings"

	"nodemend.dev/nodemend/pkg/health"
)

// ResetCandidates are the subjects (PCI addresses, as the accelerator
// monitors name GPUs) of the active faults a GPU reset resolves: the GPUs a
// ResetAccelerator order without devices resets.
func (e *Exporter) ResetCandidates() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k := range e.book.cond(health.AcceleratedHardwareReady).faults {
		if k.subject != "" && health.CatalogueRemedy(k.reason) == health.RemedyResetGPU && !slices.Contains(out, k.subject) {
			out = append(out, k.subject)
		}
	}
	slices.Sort(out)
	return out
}

// ClearAfterReset drops the faults that a GPU reset resolves on devices
// (bus IDs, "0000:3b:00.0"), once those GPUs were reset and answer healthy.
// Faults a reset does not resolve stay; a check that still sees its fault
// reports it again. Faults without a subject (adopted from the node at
// start, which does not record one) are cleared only when every GPU of the
// host was reset.
func (e *Exporter) ClearAfterReset(devices []string, everyGPU bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.book.cond(health.AcceleratedHardwareReady)
	cleared := false
	for k := range c.faults {
		if health.CatalogueRemedy(k.reason) != health.RemedyResetGPU {
			continue
		}
		if k.subject == "" {
			if everyGPU {
				delete(c.faults, k)
				cleared = true
			}
			continue
		}
		for _, d := range devices {
			if sameDevice(k.subject, d) {
				delete(c.faults, k)
				cleared = true
			}
		}
	}
	if cleared {
		e.markDirtyLocked()
	}
}

// sameDevice compares a monitor's subject ("0000:3b:00", no PCI function)
// with a bus ID ("0000:3b:00.0").
func sameDevice(subject, busID string) bool {
	subject, busID = strings.ToLower(subject), strings.ToLower(busID)
	return busID == subject || strings.HasPrefix(busID, subject+".")
}
