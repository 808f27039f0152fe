package exporter

import (
	"slices"
	"strings"

	"nodemend.dev/nodemend/pkg/health"
)

// isPCIAddress reports a PCI address as the accelerator monitors name GPUs
// ("0000:3b:00", "0000:3b:00.0"); DCGM's findings name DCGM entities
// ("GPU 0") instead, which no reset tool takes.
func isPCIAddress(s string) bool {
	s, fn, hasFn := strings.Cut(s, ".")
	parts := strings.Split(s, ":")
	if len(parts) != 3 || len(parts[0]) < 4 || len(parts[0]) > 8 || len(parts[1]) != 2 || len(parts[2]) != 2 {
		return false
	}
	if hasFn && (len(fn) != 1 || fn[0] < '0' || fn[0] > '7') {
		return false
	}
	for _, p := range parts {
		for _, c := range p {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

// ResetCandidates are the subjects (PCI addresses) of the active faults a
// GPU reset resolves: the GPUs a ResetAccelerator order without devices
// resets. None (a fault named by a DCGM entity only) lets the reset tool
// reset every GPU of the drained node.
func (e *Exporter) ResetCandidates() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k := range e.book.cond(health.AcceleratedHardwareReady).faults {
		if isPCIAddress(k.subject) && health.CatalogueRemedy(k.reason) == health.RemedyResetGPU && !slices.Contains(out, k.subject) {
			out = append(out, k.subject)
		}
	}
	slices.Sort(out)
	return out
}

// ClearAfterReset drops the faults that a GPU reset resolves on devices
// (bus IDs, "0000:3b:00.0"), once those GPUs were reset and answer healthy.
// Faults a reset does not resolve stay; a check that still sees its fault
// reports it again. Faults without a PCI address (adopted from the node at
// start, which does not record one, or named by a DCGM entity) are cleared
// only when every GPU of the host was reset.
func (e *Exporter) ClearAfterReset(devices []string, everyGPU bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.book.cond(health.AcceleratedHardwareReady)
	cleared := false
	for k := range c.faults {
		if health.CatalogueRemedy(k.reason) != health.RemedyResetGPU {
			continue
		}
		if !isPCIAddress(k.subject) {
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
