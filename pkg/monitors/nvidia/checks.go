package nvidia

import (
	"fmt"
	"math"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors/accel"
)

// --- NvidiaDeviceCountMismatch ----------------------------------------------

// countInput is what the device count check compares.
type countInput struct {
	Expected   accel.Expectation
	ExpectedOK bool
	// Driver is the number of GPUs NVML sees; -1 when NVML is unavailable.
	Driver int
	// Nodes are the N of /dev/nvidiaN.
	Nodes []int
}

// evalDeviceCount reports fewer GPUs than expected, or fewer GPUs in the
// driver than device nodes (a GPU that fell off the bus keeps its node). More
// GPUs than expected is a config mistake, not a broken node.
func evalDeviceCount(in countInput) []findingSpec {
	const reason = health.ReasonNvidiaDeviceCountMismatch
	var problems []string
	if in.Driver >= 0 && len(in.Nodes) > in.Driver {
		problems = append(problems, fmt.Sprintf("the NVIDIA driver sees %d GPUs but there are %d /dev/nvidiaN device nodes", in.Driver, len(in.Nodes)))
	}
	have := in.Driver
	if have < 0 {
		have = len(in.Nodes)
	}
	if in.ExpectedOK && have < in.Expected.Count {
		problems = append(problems, fmt.Sprintf("%d NVIDIA GPUs present, %d expected (from %s)", have, in.Expected.Count, in.Expected.Source))
	}
	if len(problems) == 0 {
		return nil
	}
	return []findingSpec{{reason: reason, message: strings.Join(problems, "; ")}}
}

// --- clocks event reasons ---------------------------------------------------

// Clocks event reason bits (nvml.h nvmlClocksEventReason* /
// nvmlClocksThrottleReason*).
const (
	ClocksGpuIdle            uint64 = 0x0000000000000001
	ClocksApplicationsClocks uint64 = 0x0000000000000002
	ClocksSwPowerCap         uint64 = 0x0000000000000004
	ClocksHwSlowdown         uint64 = 0x0000000000000008
	ClocksSyncBoost          uint64 = 0x0000000000000010
	ClocksSwThermalSlowdown  uint64 = 0x0000000000000020
	ClocksHwThermalSlowdown  uint64 = 0x0000000000000040
	ClocksHwPowerBrake       uint64 = 0x0000000000000080
	ClocksDisplayClock       uint64 = 0x0000000000000100
	ClocksBoardLimit         uint64 = 0x0000000000000200
	ClocksReliability        uint64 = 0x0000000000000400
)

// ClocksVerdict is what a clocks event reasons mask says about health.
type ClocksVerdict struct {
	// Thermal and Power name the active limiters that are faults.
	Thermal, Power []string
}

// DecodeClocks classifies the active clocks event reasons. Idle, application
// clocks, the software power cap, sync boost, display clocks and the board
// and reliability policies are how a healthy GPU runs: a busy GPU sits at its
// power cap all day. Slowdowns are faults: thermal ones are Thermal; the
// power brake, and a hardware slowdown without a thermal or brake bit (the
// power fast trigger, per nvml.h), are Power.
func DecodeClocks(mask uint64) ClocksVerdict {
	var v ClocksVerdict
	if mask&ClocksHwThermalSlowdown != 0 {
		v.Thermal = append(v.Thermal, "HW thermal slowdown")
	}
	if mask&ClocksSwThermalSlowdown != 0 {
		v.Thermal = append(v.Thermal, "SW thermal slowdown")
	}
	if mask&ClocksHwPowerBrake != 0 {
		v.Power = append(v.Power, "HW power brake slowdown")
	}
	if mask&ClocksHwSlowdown != 0 && mask&(ClocksHwThermalSlowdown|ClocksHwPowerBrake) == 0 {
		v.Power = append(v.Power, "HW slowdown")
	}
	return v
}

// --- GPU fabric health ------------------------------------------------------

// Fabric probe states (nvml.h NVML_GPU_FABRIC_STATE_*).
const (
	FabricStateNotSupported uint8 = 0
	FabricStateNotStarted   uint8 = 1
	FabricStateInProgress   uint8 = 2
	FabricStateCompleted    uint8 = 3
)

// Fabric health summaries (nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_*).
const (
	FabricSummaryNotSupported    uint8 = 0
	FabricSummaryHealthy         uint8 = 1
	FabricSummaryUnhealthy       uint8 = 2
	FabricSummaryLimitedCapacity uint8 = 3
)

// FabricHealth is the decoded GPU fabric health mask. Each field is a small
// enumeration whose 0 means "not supported" (nvml.h
// NVML_GPU_FABRIC_HEALTH_MASK_*); for the true/false fields 1 is TRUE and 2
// is FALSE, so a healthy mask is not zero.
type FabricHealth struct {
	DegradedBW            uint32 // shift 0, width 0x3
	RouteRecovery         uint32 // shift 2, width 0x3
	RouteUnhealthy        uint32 // shift 4, width 0x3
	AccessTimeoutRecovery uint32 // shift 6, width 0x3
	IncorrectConfig       uint32 // shift 8, width 0xf: 0 unsupported, 1 none, 2.. a reason
	PartitionAssigned     uint32 // shift 12, width 0x3
	GFMState              uint32 // shift 14, width 0x3: 1 connected, 2 disconnected
}

// Values of the true/false fields.
const (
	fabricTrue  = 1
	fabricFalse = 2
)

// DecodeFabricHealth applies NVML_GPU_FABRIC_HEALTH_GET to every field.
func DecodeFabricHealth(mask uint32) FabricHealth {
	get := func(shift, width uint32) uint32 { return (mask >> shift) & width }
	return FabricHealth{
		DegradedBW:            get(0, 0x3),
		RouteRecovery:         get(2, 0x3),
		RouteUnhealthy:        get(4, 0x3),
		AccessTimeoutRecovery: get(6, 0x3),
		IncorrectConfig:       get(8, 0xf),
		PartitionAssigned:     get(12, 0x3),
		GFMState:              get(14, 0x3),
	}
}

// incorrectConfig names NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*.
var incorrectConfigNames = map[uint32]string{
	2: "incorrect SysGUID", 3: "incorrect chassis serial number", 4: "no partition",
	5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location", 8: "GPU state invalid",
}

// EvalFabric classifies a GPU's fabric information: faults that make the GPU
// unusable for NVLink work (fatal), and reduced capacity that usually
// recovers (degraded). A fabric still probing is neither.
func EvalFabric(f FabricInfo) (fatal, degraded []string) {
	if !f.Supported || f.State != FabricStateCompleted {
		return nil, nil
	}
	if f.Status != 0 {
		fatal = append(fatal, fmt.Sprintf("fabric registration failed (NVML status %d)", f.Status))
	}
	h := DecodeFabricHealth(f.HealthMask)
	if h.RouteUnhealthy == fabricTrue {
		fatal = append(fatal, "NVLink fabric route unhealthy")
	}
	if h.IncorrectConfig >= 2 {
		name := incorrectConfigNames[h.IncorrectConfig]
		if name == "" {
			name = fmt.Sprintf("code %d", h.IncorrectConfig)
		}
		fatal = append(fatal, "incorrect fabric configuration: "+name)
	}
	if f.HealthSummary == FabricSummaryUnhealthy && len(fatal) == 0 {
		fatal = append(fatal, "fabric health summary Unhealthy")
	}
	if h.DegradedBW == fabricTrue {
		degraded = append(degraded, "NVLink bandwidth degraded")
	}
	if h.RouteRecovery == fabricTrue {
		degraded = append(degraded, "fabric route recovery in progress")
	}
	if h.AccessTimeoutRecovery == fabricTrue {
		degraded = append(degraded, "fabric access timeout recovery in progress")
	}
	if h.GFMState == fabricFalse {
		degraded = append(degraded, "global fabric manager disconnected")
	}
	if f.HealthSummary == FabricSummaryLimitedCapacity && len(degraded) == 0 {
		degraded = append(degraded, "fabric health summary Limited Capacity")
	}
	return fatal, degraded
}

// --- per-device health ------------------------------------------------------

// deviceState is what the health check remembers about a device between runs.
type deviceState struct {
	replays     Value
	replaysAt   time.Time
	linksSeenUp map[int]bool
}

// healthInput is one run of the health check.
type healthInput struct {
	Device Device
	Sample Sample
	// NVSwitch is true on a node with NVSwitches, where every NVLink must be up.
	NVSwitch bool
	// ReplaysPerMinute is the NvidiaPCIeError threshold.
	ReplaysPerMinute float64
	// XID48 is when the kernel last logged XID 48 for the device (zero:
	// never), named in the double-bit error's message.
	XID48 time.Time
}

// evalHealth evaluates one device's sample against its previous state and
// returns the findings and the new state. Pure: prev is not modified.
func evalHealth(in healthInput, prev deviceState) ([]findingSpec, deviceState) {
	d, s := in.Device, in.Sample
	name := d.Name()
	var out []findingSpec
	add := func(reason, format string, args ...any) {
		out = append(out, findingSpec{reason: reason, subject: d.PCI, message: name + ": " + fmt.Sprintf(format, args...)})
	}

	if v := s.Field(FieldECCDBEVolatileTotal); v.OK && v.V > 0 {
		xid := ""
		if !in.XID48.IsZero() {
			xid = fmt.Sprintf(" (logged as XID 48 at %s)", in.XID48.UTC().Format(time.RFC3339))
		}
		add(health.ReasonNvidiaDoubleBitError, "%d uncorrectable (double-bit) ECC errors since the driver loaded%s; reset the GPU", v.V, xid)
	}
	var pending []string
	if v := s.Field(FieldRetiredPending); v.OK && v.V == 1 {
		pending = append(pending, "pages pending retirement")
	}
	if v := s.Field(FieldRemappedPending); v.OK && v.V == 1 {
		pending = append(pending, "rows pending remapping")
	}
	if len(pending) > 0 {
		add(health.ReasonNvidiaPageRetirement, "%s; takes effect at the next GPU reset", strings.Join(pending, " and "))
	}
	if v := s.Field(FieldRemappedFailure); v.OK && v.V == 1 {
		add(health.ReasonNvidiaRowRemapFailure, "a memory row could not be remapped (no spare rows left)")
	}

	if s.ClocksEventReasons.OK {
		v := DecodeClocks(s.ClocksEventReasons.V)
		if len(v.Thermal) > 0 {
			add(health.ReasonNvidiaThermalError, "clocks reduced: %s (clocks event reasons 0x%x)", strings.Join(v.Thermal, ", "), s.ClocksEventReasons.V)
		}
		if len(v.Power) > 0 {
			add(health.ReasonNvidiaPowerError, "clocks reduced: %s (clocks event reasons 0x%x)", strings.Join(v.Power, ", "), s.ClocksEventReasons.V)
		}
	}

	next := deviceState{linksSeenUp: map[int]bool{}}
	for l := range prev.linksSeenUp {
		next.linksSeenUp[l] = true
	}
	var down []string
	for l, st := range s.NVLinks {
		switch st {
		case LinkUp:
			next.linksSeenUp[l] = true
		case LinkDown:
			// A link that was never up may be unused by design (a PCIe card
			// without a bridge); on NVSwitch systems every link is wired.
			if prev.linksSeenUp[l] || in.NVSwitch {
				down = append(down, fmt.Sprint(l))
			}
		}
	}
	if len(down) > 0 {
		add(health.ReasonNvidiaNVLinkError, "NVLink %s down", strings.Join(down, ", "))
	}

	fatal, degraded := EvalFabric(s.Fabric)
	if len(fatal) > 0 {
		add(health.ReasonNvidiaFabricError, "%s", strings.Join(fatal, "; "))
	}
	if len(degraded) > 0 {
		add(health.ReasonNvidiaFabricDegraded, "%s", strings.Join(degraded, "; "))
	}

	replays := s.Field(FieldPCIeReplayCounter)
	next.replays, next.replaysAt = replays, s.Taken
	if rate, ok := replayRate(prev.replays, prev.replaysAt, replays, s.Taken); ok && rate >= in.ReplaysPerMinute {
		add(health.ReasonNvidiaPCIeError, "%.1f PCIe replays per minute (counter %d)", rate, replays.V)
	}
	return out, next
}

// replayRate is the growth of the PCIe replay counter per minute between two
// readings. A counter that went down (driver reload, GPU reset) has no rate.
func replayRate(prev Value, prevAt time.Time, cur Value, curAt time.Time) (float64, bool) {
	if !prev.OK || !cur.OK || cur.V < prev.V || prevAt.IsZero() || !curAt.After(prevAt) {
		return 0, false
	}
	minutes := curAt.Sub(prevAt).Minutes()
	rate := float64(cur.V-prev.V) / minutes
	if math.IsInf(rate, 0) || math.IsNaN(rate) {
		return 0, false
	}
	return rate, true
}

// --- FabricManagerNotRunning ------------------------------------------------

// evalFabricManager reports a node with NVSwitches (device nodes
// /dev/nvidia-nvswitchN, HGX systems) where nv-fabricmanager does not run.
func evalFabricManager(nvswitches int, running bool) []findingSpec {
	if nvswitches == 0 || running {
		return nil
	}
	return []findingSpec{{reason: health.ReasonFabricManagerNotRunning,
		message: fmt.Sprintf("%d NVSwitches present but the nv-fabricmanager process is not running", nvswitches)}}
}

// --- NVML events ------------------------------------------------------------

// eventFinding turns an NVML event into a finding. XID events carry the XID
// number; a double-bit ECC event is NvidiaDoubleBitError, the reason the
// DBE counter check and a folded XID 48 (dbe.go) report for the same GPU,
// so that every path raises one fault.
func eventFinding(ev Event) (findingSpec, bool) {
	switch ev.Kind {
	case EventXID:
		code := int(min(ev.XID, 1<<31-1))
		x := XIDEvent{PCI: ev.Device.PCI, Code: code, Detail: "reported by an NVML event"}
		if ev.XID == 999 {
			x.Detail = "unknown XID reported by an NVML event"
		}
		return findingSpec{reason: xidReason(code), message: xidMessage(x), subject: ev.Device.PCI}, true
	case EventDoubleBitECC:
		return findingSpec{reason: health.ReasonNvidiaDoubleBitError, subject: ev.Device.PCI,
			message: ev.Device.Name() + ": double-bit ECC error reported by an NVML event; reset the GPU"}, true
	}
	return findingSpec{}, false
}
