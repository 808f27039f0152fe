package nvidia

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// Driver is what the monitor needs from NVML. The real one
// (pkg/monitors/nvidia/nvmllib) wraps github.com/NVIDIA/go-nvml and needs
// cgo; tests and simulations use nvidiafake. Keeping NVML behind this small
// interface keeps the checks pure and the package buildable without cgo.
type Driver interface {
	// Devices lists the GPUs the driver sees, in NVML index order.
	Devices() ([]Device, error)
	// Sample reads one device's health fields. Fields the device does not
	// support are left unset (their OK flags false), not errors.
	Sample(index int) (Sample, error)
	// WatchEvents registers for XID critical-error and double-bit ECC events
	// on every device and calls fn for each one as it happens, until ctx
	// ends or the driver fails.
	WatchEvents(ctx context.Context, fn func(Event)) error
	// Close releases the library.
	Close() error
}

// Opener loads NVML from libraryPath ("" = the default libnvidia-ml.so.1).
// It returns an error wrapping ErrNoDriver when the library or the kernel
// driver is absent: the node has no usable NVIDIA driver.
type Opener func(libraryPath string) (Driver, error)

// ErrNoDriver is wrapped by Opener errors that mean "no NVIDIA driver here"
// rather than "the driver is broken".
var ErrNoDriver = errors.New("NVIDIA driver library not available")

// Device identifies a GPU.
type Device struct {
	Index int
	UUID  string
	// PCI is the normalized PCI address (NormalizePCI).
	PCI string
	// Minor is the N of /dev/nvidiaN; -1 when unknown.
	Minor int
}

// Name is how messages name the device.
func (d Device) Name() string {
	if d.PCI != "" {
		return "GPU " + d.PCI
	}
	return "GPU " + d.UUID
}

// Sample is one reading of a device's health fields.
type Sample struct {
	// Fields are the NVML field values of FieldIDs, as read.
	Fields []FieldValue
	// ClocksEventReasons is nvmlDeviceGetCurrentClocksEventReasons.
	ClocksEventReasons Value
	// NVLinks is the state of links 0..n-1 (n from NVML_FI_DEV_NVLINK_LINK_COUNT).
	NVLinks []LinkState
	// Fabric is nvmlDeviceGetGpuFabricInfoV (v3).
	Fabric FabricInfo
	// Taken is when the sample was read.
	Taken time.Time
}

// Value is a reading that may be unsupported.
type Value struct {
	V  uint64
	OK bool
}

// LinkState is one NVLink's state.
type LinkState int

const (
	// LinkUnsupported: NVML does not report this link.
	LinkUnsupported LinkState = iota
	LinkUp
	LinkDown
)

// FabricInfo is the part of nvmlGpuFabricInfo_v3_t that health needs.
type FabricInfo struct {
	// Supported is false when the GPU has no fabric (NVML_ERROR_NOT_SUPPORTED
	// or probe state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED).
	Supported bool
	State     uint8
	// Status is the nvmlReturn_t of the probe, valid once State is Completed.
	Status        uint32
	HealthMask    uint32
	HealthSummary uint8
}

// Event is an NVML event.
type Event struct {
	Device Device
	Kind   EventKind
	// XID is the nvmlEventData_t eventData of an XID event (999 = unknown XID).
	XID      uint64
	Observed time.Time
}

// EventKind is the NVML event type (nvml.h nvmlEventType*).
type EventKind uint64

// NVML event type bits (nvml.h).
const (
	EventDoubleBitECC EventKind = 0x0000000000000002 // nvmlEventTypeDoubleBitEccError
	EventXID          EventKind = 0x0000000000000008 // nvmlEventTypeXidCriticalError
)

// NVML field identifiers (nvml.h NVML_FI_DEV_*) that the health check reads.
const (
	FieldECCDBEVolatileTotal    uint32 = 4   // NVML_FI_DEV_ECC_DBE_VOL_TOTAL
	FieldRetiredPending         uint32 = 31  // NVML_FI_DEV_RETIRED_PENDING
	FieldNVLinkLinkCount        uint32 = 91  // NVML_FI_DEV_NVLINK_LINK_COUNT
	FieldPCIeReplayCounter      uint32 = 94  // NVML_FI_DEV_PCIE_REPLAY_COUNTER
	FieldRemappedPending        uint32 = 144 // NVML_FI_DEV_REMAPPED_PENDING
	FieldRemappedFailure        uint32 = 145 // NVML_FI_DEV_REMAPPED_FAILURE
	FieldNVSwitchConnectedLinks uint32 = 147 // NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT
)

// FieldIDs are the fields Sample reads, in one nvmlDeviceGetFieldValues call.
func FieldIDs() []uint32 {
	return []uint32{FieldECCDBEVolatileTotal, FieldRetiredPending, FieldNVLinkLinkCount,
		FieldPCIeReplayCounter, FieldRemappedPending, FieldRemappedFailure, FieldNVSwitchConnectedLinks}
}

// FieldValue is an nvmlFieldValue_t as NVML returns it: the value is a C
// union (nvmlValue_t) whose member is chosen by ValueType.
type FieldValue struct {
	ID uint32
	// Return is the per-field nvmlReturn_t; non-zero means not read.
	Return    uint32
	ValueType uint32
	Raw       [8]byte
}

// NVML value types (nvml.h nvmlValueType_t).
const (
	valueTypeDouble           = 0
	valueTypeUnsignedInt      = 1
	valueTypeUnsignedLong     = 2
	valueTypeUnsignedLongLong = 3
	valueTypeSignedLongLong   = 4
	valueTypeSignedInt        = 5
	valueTypeUnsignedShort    = 6
)

// Decode reads the union member that ValueType names. Linux on amd64 and
// arm64 is little-endian and LP64 (unsigned long is 8 bytes). Negative and
// non-finite values, which no counter or flag here can take, are not OK.
func (f FieldValue) Decode() (uint64, bool) {
	if f.Return != 0 {
		return 0, false
	}
	le := binary.LittleEndian
	switch f.ValueType {
	case valueTypeUnsignedInt:
		return uint64(le.Uint32(f.Raw[:4])), true
	case valueTypeUnsignedLong, valueTypeUnsignedLongLong:
		return le.Uint64(f.Raw[:]), true
	case valueTypeSignedLongLong:
		v := int64(le.Uint64(f.Raw[:]))
		if v < 0 {
			return 0, false
		}
		return uint64(v), true
	case valueTypeSignedInt:
		v := int32(le.Uint32(f.Raw[:4]))
		if v < 0 {
			return 0, false
		}
		return uint64(v), true
	case valueTypeUnsignedShort:
		return uint64(le.Uint16(f.Raw[:2])), true
	case valueTypeDouble:
		d := math.Float64frombits(le.Uint64(f.Raw[:]))
		if d < 0 || math.IsNaN(d) || d >= math.MaxUint64 {
			return 0, false
		}
		return uint64(d), true
	}
	return 0, false
}

// Field returns the decoded value of field id in s.
func (s Sample) Field(id uint32) Value {
	for _, f := range s.Fields {
		if f.ID == id {
			v, ok := f.Decode()
			return Value{V: v, OK: ok}
		}
	}
	return Value{}
}
