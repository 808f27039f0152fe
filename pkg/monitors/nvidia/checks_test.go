package nvidia

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors/accel"
)

// Bit values from nvml.h (go-nvml v0.13.4-1, pkg/nvml/nvml.h,
// nvmlClocksEventReason* / nvmlClocksThrottleReason*). Healthy non-zero
// masks exist: a busy GPU at its power cap reports 0x4.
func TestDecodeClocks(t *testing.T) {
	cases := []struct {
		name           string
		mask           uint64
		thermal, power []string
	}{
		{"none", 0x0, nil, nil},
		{"idle", 0x1, nil, nil},
		{"applications clocks setting", 0x2, nil, nil},
		{"SW power cap under load is healthy", 0x4, nil, nil},
		{"sync boost", 0x10, nil, nil},
		{"display clock setting", 0x100, nil, nil},
		{"board limit", 0x200, nil, nil},
		{"reliability", 0x400, nil, nil},
		{"power cap + idle", 0x5, nil, nil},
		{"HW slowdown alone (power fast trigger)", 0x8, nil, []string{"HW slowdown"}},
		{"SW thermal slowdown", 0x20, []string{"SW thermal slowdown"}, nil},
		{"HW thermal slowdown with HW slowdown", 0x48, []string{"HW thermal slowdown"}, nil},
		{"HW power brake with HW slowdown", 0x88, nil, []string{"HW power brake slowdown"}},
		{"thermal and brake", 0xe8, []string{"HW thermal slowdown", "SW thermal slowdown"}, []string{"HW power brake slowdown"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := DecodeClocks(tc.mask)
			if !reflect.DeepEqual(v.Thermal, tc.thermal) || !reflect.DeepEqual(v.Power, tc.power) {
				t.Fatalf("DecodeClocks(0x%x) = %+v", tc.mask, v)
			}
		})
	}
}

// Shifts and widths from nvml.h NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_* /
// _WIDTH_*: degraded BW 0/0x3, route recovery 2/0x3, route unhealthy 4/0x3,
// access timeout recovery 6/0x3, incorrect configuration 8/0xf, partition
// assigned 12/0x3, GFM state 14/0x3.
func TestDecodeFabricHealth(t *testing.T) {
	// Every field at its healthy value: DEGRADED_BW_FALSE(2),
	// ROUTE_RECOVERY_FALSE(2), ROUTE_UNHEALTHY_FALSE(2),
	// ACCESS_TIMEOUT_RECOVERY_FALSE(2), INCORRECT_CONFIGURATION_NONE(1),
	// PARTITION_ASSIGNED_TRUE(1), GFM_STATE_CONNECTED(1).
	const healthy = 2<<0 | 2<<2 | 2<<4 | 2<<6 | 1<<8 | 1<<12 | 1<<14 // 0x51aa
	if healthy != 0x51aa {
		t.Fatalf("fixture arithmetic: 0x%x", healthy)
	}
	want := FabricHealth{DegradedBW: 2, RouteRecovery: 2, RouteUnhealthy: 2, AccessTimeoutRecovery: 2, IncorrectConfig: 1, PartitionAssigned: 1, GFMState: 1}
	if got := DecodeFabricHealth(healthy); got != want {
		t.Fatalf("DecodeFabricHealth(0x%x) = %+v", healthy, got)
	}
	if got := DecodeFabricHealth(0xf << 8); got.IncorrectConfig != 0xf || got.DegradedBW != 0 || got.PartitionAssigned != 0 {
		t.Fatalf("4-bit incorrect configuration field: %+v", got)
	}
	if got := DecodeFabricHealth(0xffffffff); got != (FabricHealth{3, 3, 3, 3, 0xf, 3, 3}) {
		t.Fatalf("all ones: %+v", got)
	}
}

func TestEvalFabric(t *testing.T) {
	const healthy = 0x51aa
	set := func(mask uint32, shift, width, v uint32) uint32 { return mask&^(width<<shift) | v<<shift }
	done := func(mask uint32, summary uint8) FabricInfo {
		return FabricInfo{Supported: true, State: FabricStateCompleted, HealthMask: mask, HealthSummary: summary}
	}
	cases := []struct {
		name            string
		f               FabricInfo
		fatal, degraded []string
	}{
		{"no fabric (PCIe GPU)", FabricInfo{}, nil, nil},
		{"probe in progress", FabricInfo{Supported: true, State: FabricStateInProgress, Status: 5}, nil, nil},
		{"healthy, summary healthy", done(healthy, FabricSummaryHealthy), nil, nil},
		{"health mask not supported (all zero)", done(0, FabricSummaryNotSupported), nil, nil},
		{"registration failed", FabricInfo{Supported: true, State: FabricStateCompleted, Status: 999, HealthMask: healthy}, []string{"fabric registration failed (NVML status 999)"}, nil},
		{"route unhealthy", done(set(healthy, 4, 3, 1), FabricSummaryUnhealthy), []string{"NVLink fabric route unhealthy"}, nil},
		{"insufficient NVLinks", done(set(healthy, 8, 0xf, 5), FabricSummaryHealthy), []string{"incorrect fabric configuration: insufficient NVLinks"}, nil},
		{"summary unhealthy alone", done(healthy, FabricSummaryUnhealthy), []string{"fabric health summary Unhealthy"}, nil},
		{"degraded bandwidth", done(set(healthy, 0, 3, 1), FabricSummaryLimitedCapacity), nil, []string{"NVLink bandwidth degraded"}},
		{"route recovery in progress", done(set(healthy, 2, 3, 1), FabricSummaryHealthy), nil, []string{"fabric route recovery in progress"}},
		{"access timeout recovery", done(set(healthy, 6, 3, 1), FabricSummaryHealthy), nil, []string{"fabric access timeout recovery in progress"}},
		{"GFM disconnected", done(set(healthy, 14, 3, 2), FabricSummaryHealthy), nil, []string{"global fabric manager disconnected"}},
		{"partition not assigned is not a fault", done(set(healthy, 12, 3, 2), FabricSummaryHealthy), nil, nil},
		{"limited capacity alone", done(healthy, FabricSummaryLimitedCapacity), nil, []string{"fabric health summary Limited Capacity"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fatal, degraded := EvalFabric(tc.f)
			if !reflect.DeepEqual(fatal, tc.fatal) || !reflect.DeepEqual(degraded, tc.degraded) {
				t.Fatalf("EvalFabric = %q, %q", fatal, degraded)
			}
		})
	}
}

// nvmlValue_t is a union; nvmlValueType_t (nvml.h) says which member is set:
// 0 double, 1 unsigned int, 2 unsigned long, 3 unsigned long long,
// 4 signed long long, 5 signed int, 6 unsigned short.
func TestFieldValueDecode(t *testing.T) {
	raw := func(v uint64) (b [8]byte) { binary.LittleEndian.PutUint64(b[:], v); return b }
	cases := []struct {
		name string
		f    FieldValue
		want uint64
		ok   bool
	}{
		{"unsigned int ignores the high word", FieldValue{ValueType: 1, Raw: raw(0xdeadbeef_00000007)}, 7, true},
		{"unsigned long", FieldValue{ValueType: 2, Raw: raw(1 << 40)}, 1 << 40, true},
		{"unsigned long long", FieldValue{ValueType: 3, Raw: raw(12345)}, 12345, true},
		{"signed long long positive", FieldValue{ValueType: 4, Raw: raw(3)}, 3, true},
		{"signed long long negative", FieldValue{ValueType: 4, Raw: raw(math.MaxUint64)}, 0, false},
		{"signed int negative", FieldValue{ValueType: 5, Raw: raw(0xffffffff)}, 0, false},
		{"unsigned short", FieldValue{ValueType: 6, Raw: raw(0xffff_0001)}, 1, true},
		{"double", FieldValue{ValueType: 0, Raw: raw(math.Float64bits(2.0))}, 2, true},
		{"double NaN", FieldValue{ValueType: 0, Raw: raw(math.Float64bits(math.NaN()))}, 0, false},
		{"per-field error (NVML_ERROR_NOT_SUPPORTED)", FieldValue{Return: 3, ValueType: 3, Raw: raw(1)}, 0, false},
		{"unknown type", FieldValue{ValueType: 7}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if v, ok := tc.f.Decode(); v != tc.want || ok != tc.ok {
				t.Fatalf("Decode = %d, %v; want %d, %v", v, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzDecoders(f *testing.F) {
	f.Add(uint64(0x51aa), uint32(3), []byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, mask uint64, vt uint32, raw []byte) {
		DecodeClocks(mask)
		h := DecodeFabricHealth(uint32(mask))
		if h.IncorrectConfig > 0xf || h.GFMState > 3 || h.DegradedBW > 3 {
			t.Fatalf("field out of its width: %+v", h)
		}
		fv := FieldValue{ValueType: vt}
		copy(fv.Raw[:], raw)
		fv.Decode()
		EvalFabric(FabricInfo{Supported: true, State: FabricStateCompleted, HealthMask: uint32(mask), HealthSummary: uint8(vt)})
	})
}

func reasons(fs []findingSpec) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.reason)
	}
	return out
}

func TestEvalHealth(t *testing.T) {
	dev := Device{Index: 0, UUID: "GPU-1", PCI: "0000:1b:00"}
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	sample := func(fields ...FieldValue) Sample { return Sample{Fields: fields, Taken: at} }
	t.Run("healthy", func(t *testing.T) {
		s := sample(UintField(FieldECCDBEVolatileTotal, 0), UintField(FieldRetiredPending, 0), UintField(FieldRemappedPending, 0), UintField(FieldRemappedFailure, 0))
		s.ClocksEventReasons = Value{V: ClocksSwPowerCap, OK: true}
		s.NVLinks = []LinkState{LinkUp, LinkUp}
		fs, next := evalHealth(healthInput{Device: dev, Sample: s, ReplaysPerMinute: 8}, deviceState{})
		if fs != nil || !next.linksSeenUp[0] || !next.linksSeenUp[1] {
			t.Fatalf("findings %+v, state %+v", fs, next)
		}
	})
	t.Run("memory faults", func(t *testing.T) {
		s := sample(UintField(FieldECCDBEVolatileTotal, 2), UintField(FieldRemappedPending, 1), UintField(FieldRemappedFailure, 1))
		fs, _ := evalHealth(healthInput{Device: dev, Sample: s}, deviceState{})
		want := []string{health.ReasonNvidiaDoubleBitError, health.ReasonNvidiaPageRetirement, health.ReasonNvidiaRowRemapFailure}
		if !reflect.DeepEqual(reasons(fs), want) || fs[0].subject != "0000:1b:00" {
			t.Fatalf("findings %+v", fs)
		}
	})
	t.Run("unsupported fields are not faults", func(t *testing.T) {
		s := sample(FieldValue{ID: FieldECCDBEVolatileTotal, Return: 3, ValueType: 3, Raw: [8]byte{9}})
		if fs, _ := evalHealth(healthInput{Device: dev, Sample: s}, deviceState{}); fs != nil {
			t.Fatalf("findings %+v", fs)
		}
	})
	t.Run("throttling", func(t *testing.T) {
		s := sample()
		s.ClocksEventReasons = Value{V: ClocksHwThermalSlowdown | ClocksHwSlowdown | ClocksHwPowerBrake, OK: true}
		fs, _ := evalHealth(healthInput{Device: dev, Sample: s}, deviceState{})
		if !reflect.DeepEqual(reasons(fs), []string{health.ReasonNvidiaThermalError, health.ReasonNvidiaPowerError}) {
			t.Fatalf("findings %+v", fs)
		}
	})
	t.Run("NVLink down only once seen up, or on NVSwitch systems", func(t *testing.T) {
		s := sample()
		s.NVLinks = []LinkState{LinkUp, LinkDown, LinkUnsupported}
		fs, st := evalHealth(healthInput{Device: dev, Sample: s}, deviceState{})
		if fs != nil {
			t.Fatalf("a link never seen up is not a fault on a PCIe system: %+v", fs)
		}
		s.NVLinks = []LinkState{LinkDown, LinkDown, LinkUnsupported}
		fs, _ = evalHealth(healthInput{Device: dev, Sample: s}, st)
		if !reflect.DeepEqual(reasons(fs), []string{health.ReasonNvidiaNVLinkError}) || fs[0].message != "GPU 0000:1b:00: NVLink 0 down" {
			t.Fatalf("findings %+v", fs)
		}
		fs, _ = evalHealth(healthInput{Device: dev, Sample: s, NVSwitch: true}, deviceState{})
		if len(fs) != 1 || fs[0].message != "GPU 0000:1b:00: NVLink 0, 1 down" {
			t.Fatalf("NVSwitch system: %+v", fs)
		}
	})
	t.Run("PCIe replay rate", func(t *testing.T) {
		s1 := sample(UintField(FieldPCIeReplayCounter, 100))
		fs, st := evalHealth(healthInput{Device: dev, Sample: s1, ReplaysPerMinute: 8}, deviceState{})
		if fs != nil {
			t.Fatal("the first reading has no rate")
		}
		s2 := Sample{Fields: []FieldValue{UintField(FieldPCIeReplayCounter, 105)}, Taken: at.Add(time.Minute)}
		if fs, st = evalHealth(healthInput{Device: dev, Sample: s2, ReplaysPerMinute: 8}, st); fs != nil {
			t.Fatalf("5/min is below 8/min: %+v", fs)
		}
		s3 := Sample{Fields: []FieldValue{UintField(FieldPCIeReplayCounter, 125)}, Taken: at.Add(90 * time.Second)}
		if fs, st = evalHealth(healthInput{Device: dev, Sample: s3, ReplaysPerMinute: 8}, st); !reflect.DeepEqual(reasons(fs), []string{health.ReasonNvidiaPCIeError}) {
			t.Fatalf("40/min: %+v", fs)
		}
		s4 := Sample{Fields: []FieldValue{UintField(FieldPCIeReplayCounter, 0)}, Taken: at.Add(2 * time.Minute)}
		if fs, _ = evalHealth(healthInput{Device: dev, Sample: s4, ReplaysPerMinute: 8}, st); fs != nil {
			t.Fatalf("a reset counter has no rate: %+v", fs)
		}
	})
}

func TestEvalDeviceCount(t *testing.T) {
	exp := accel.Expectation{Count: 8, Source: "instance type p5.48xlarge"}
	cases := []struct {
		name string
		in   countInput
		want string
	}{
		{"all present", countInput{Expected: exp, ExpectedOK: true, Driver: 8, Nodes: []int{0, 1, 2, 3, 4, 5, 6, 7}}, ""},
		{"unknown expectation, consistent", countInput{Driver: 2, Nodes: []int{0, 1}}, ""},
		{"more than expected is not a fault", countInput{Expected: exp, ExpectedOK: true, Driver: 9, Nodes: make([]int, 9)}, ""},
		{"driver lost one", countInput{Expected: exp, ExpectedOK: true, Driver: 7, Nodes: make([]int, 8)},
			"the NVIDIA driver sees 7 GPUs but there are 8 /dev/nvidiaN device nodes; 7 NVIDIA GPUs present, 8 expected (from instance type p5.48xlarge)"},
		{"no NVML: device nodes vs expected", countInput{Expected: exp, ExpectedOK: true, Driver: -1, Nodes: make([]int, 6)}, "6 NVIDIA GPUs present, 8 expected (from instance type p5.48xlarge)"},
		{"no NVML, no expectation", countInput{Driver: -1, Nodes: make([]int, 6)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := evalDeviceCount(tc.in)
			got := ""
			if len(fs) == 1 && fs[0].reason == health.ReasonNvidiaDeviceCountMismatch {
				got = fs[0].message
			} else if len(fs) > 1 {
				t.Fatalf("findings %+v", fs)
			}
			if got != tc.want {
				t.Fatalf("message %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEventFinding(t *testing.T) {
	dev := Device{Index: 3, UUID: "GPU-3", PCI: "0000:3b:00"}
	f, ok := eventFinding(Event{Device: dev, Kind: EventXID, XID: 79})
	if !ok || f.reason != health.ReasonNvidiaXID79Error || f.subject != "0000:3b:00" {
		t.Fatalf("XID event: %+v", f)
	}
	if f, _ := eventFinding(Event{Device: dev, Kind: EventXID, XID: 999}); f.reason != health.ReasonNvidiaXIDWarning {
		t.Fatalf("unknown XID (999 per nvml.h) must be a Warning: %+v", f)
	}
	if f, _ := eventFinding(Event{Device: dev, Kind: EventDoubleBitECC}); f.reason != health.ReasonNvidiaDoubleBitError || f.subject != "0000:3b:00" {
		t.Fatalf("DBE event: %+v", f)
	}
	if _, ok := eventFinding(Event{Device: dev, Kind: 0x4}); ok {
		t.Fatal("PState events are not faults")
	}
}

func TestEvalFabricManager(t *testing.T) {
	if evalFabricManager(0, false) != nil || evalFabricManager(6, true) != nil {
		t.Fatal("no fault without NVSwitches or with FM running")
	}
	if fs := evalFabricManager(4, false); len(fs) != 1 || fs[0].reason != health.ReasonFabricManagerNotRunning {
		t.Fatalf("%+v", fs)
	}
}

func TestFoldXID48(t *testing.T) {
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		nvml bool
		g    dbeGPU
		want bool
	}{
		{"kernel only: no NVML", false, dbeGPU{}, false},
		{"NVML, the GPU not sampled yet", true, dbeGPU{}, true},
		{"NVML reads the GPU's DBE counter", true, dbeGPU{counterKnown: true, counterSupported: true}, true},
		{"counter unsupported, no NVML report", true, dbeGPU{counterKnown: true}, false},
		{"counter unsupported, NVML's DBE event 20s before", true, dbeGPU{counterKnown: true, reported: at.Add(-20 * time.Second)}, true},
		{"counter unsupported, NVML's DBE event 20s after (the kernel line came first)", true, dbeGPU{counterKnown: true, reported: at.Add(20 * time.Second)}, true},
		{"counter unsupported, NVML's DBE an hour before: another fault", true, dbeGPU{counterKnown: true, reported: at.Add(-time.Hour)}, false},
	} {
		if got := foldXID48(tc.nvml, tc.g, at); got != tc.want {
			t.Errorf("%s: fold %v, want %v", tc.name, got, tc.want)
		}
	}
	// The health check names the XID it folded.
	in := healthInput{Device: Device{PCI: "0000:3b:00"}, Sample: Sample{Fields: []FieldValue{UintField(FieldECCDBEVolatileTotal, 2)}}, XID48: at}
	fs, _ := evalHealth(in, deviceState{})
	if len(fs) != 1 || fs[0].reason != health.ReasonNvidiaDoubleBitError || !strings.Contains(fs[0].message, "2 uncorrectable (double-bit) ECC errors since the driver loaded (logged as XID 48 at 2026-03-14T09:00:00Z)") {
		t.Fatalf("%+v", fs)
	}
}
