package remediate

import (
	"strings"

	"nodemend.dev/nodemend/pkg/health"
)

// Which of the node's AcceleratedHardwareReady faults a GPU reset resolves:
// the executor resets the GPUs they name when an order names none, and
// clears them once those GPUs were reset and answer healthy (the agent
// wires both to its exporter's faults).

// ResetCandidate reports whether the fault (reason, subject) names a GPU
// that a reset of it resolves: a reason whose remedy is a GPU reset, on a
// PCI address. A fault named by a DCGM entity ("GPU 0") is none, as no
// reset tool takes one; without any candidate the reset tool resets every
// GPU of the drained node.
func ResetCandidate(reason, subject string) bool {
	return isPCIAddress(subject) && health.CatalogueRemedy(reason) == health.RemedyResetGPU
}

// ClearedByReset says which faults a reset of devices (bus IDs,
// "0000:3b:00.0") resolved, once those GPUs were reset and answer healthy:
// those a reset resolves on one of devices. Faults a reset does not resolve
// stay. Faults without a PCI address (adopted from the node at start,
// which does not record one, or named by a DCGM entity) are cleared only
// when every GPU of the host was reset.
func ClearedByReset(devices []string, everyGPU bool) func(reason, subject string) bool {
	return func(reason, subject string) bool {
		if health.CatalogueRemedy(reason) != health.RemedyResetGPU {
			return false
		}
		if !isPCIAddress(subject) {
			return everyGPU
		}
		for _, d := range devices {
			if sameDevice(subject, d) {
				return true
			}
		}
		return false
	}
}

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

// sameDevice compares a monitor's subject ("0000:3b:00", no PCI function)
// with a bus ID ("0000:3b:00.0").
func sameDevice(subject, busID string) bool {
	subject, busID = strings.ToLower(subject), strings.ToLower(busID)
	return busID == subject || strings.HasPrefix(busID, subject+".")
}
