package dcgm

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Code is a DCGM error code (dcgm_errors.h dcgmError_t, DCGM_FR_*). Health
// watch incidents and diagnostic errors carry one; the EKS node monitoring
// agent names its reasons after it (DCGMHealthCode<N>).
type Code int

// Codes that the mapping treats specially.
const (
	CodeOK              Code = 0   // DCGM_FR_OK
	CodeUnknown         Code = 1   // DCGM_FR_UNKNOWN: also what an unrecognized health message is reported as
	CodeFieldViolation  Code = 33  // DCGM_FR_FIELD_VIOLATION (fabric health, ConnectX)
	CodeNVLinkCritical  Code = 71  // DCGM_FR_NVLINK_ERROR_CRITICAL
	CodeXID             Code = 101 // DCGM_FR_XID_ERROR
	CodeIMEXUnhealthy   Code = 122 // DCGM_FR_IMEX_UNHEALTHY
	CodeFabricProbe     Code = 123 // DCGM_FR_FABRIC_PROBE_STATE
	codeErrorSentinel   Code = 133 // DCGM_FR_ERROR_SENTINEL, one past the last code of DCGM 4.6
	maxCodeNameListSize      = int(codeErrorSentinel)
)

// codeNames are the dcgmError_t enumerators of DCGM 4.6, by value.
var codeNames = [maxCodeNameListSize]string{
	"OK", "UNKNOWN", "UNRECOGNIZED", "PCI_REPLAY_RATE", "VOLATILE_DBE_DETECTED", "VOLATILE_SBE_DETECTED",
	"PENDING_PAGE_RETIREMENTS", "RETIRED_PAGES_LIMIT", "RETIRED_PAGES_DBE_LIMIT", "CORRUPT_INFOROM",
	"CLOCKS_EVENT_THERMAL", "POWER_UNREADABLE", "CLOCKS_EVENT_POWER", "NVLINK_ERROR_THRESHOLD", "NVLINK_DOWN",
	"NVSWITCH_FATAL_ERROR", "NVSWITCH_NON_FATAL_ERROR", "NVSWITCH_DOWN", "NO_ACCESS_TO_FILE", "NVML_API",
	"DEVICE_COUNT_MISMATCH", "BAD_PARAMETER", "CANNOT_OPEN_LIB", "DENYLISTED_DRIVER", "NVML_LIB_BAD",
	"GRAPHICS_PROCESSES", "HOSTENGINE_CONN", "FIELD_QUERY", "BAD_CUDA_ENV", "PERSISTENCE_MODE", "LOW_BANDWIDTH",
	"HIGH_LATENCY", "CANNOT_GET_FIELD_TAG", "FIELD_VIOLATION", "FIELD_THRESHOLD", "FIELD_VIOLATION_DBL",
	"FIELD_THRESHOLD_DBL", "UNSUPPORTED_FIELD_TYPE", "FIELD_THRESHOLD_TS", "FIELD_THRESHOLD_TS_DBL",
	"THERMAL_VIOLATIONS", "THERMAL_VIOLATIONS_TS", "TEMP_VIOLATION", "CLOCKS_EVENT_VIOLATION", "INTERNAL",
	"PCIE_GENERATION", "PCIE_WIDTH", "ABORTED", "TEST_DISABLED", "CANNOT_GET_STAT", "STRESS_LEVEL", "CUDA_API",
	"FAULTY_MEMORY", "CANNOT_SET_WATCHES", "CUDA_UNBOUND", "ECC_DISABLED", "MEMORY_ALLOC", "CUDA_DBE",
	"MEMORY_MISMATCH", "CUDA_DEVICE", "ECC_UNSUPPORTED", "ECC_PENDING", "MEMORY_BANDWIDTH", "TARGET_POWER",
	"API_FAIL", "API_FAIL_GPU", "CUDA_CONTEXT", "DCGM_API", "CONCURRENT_GPUS", "TOO_MANY_ERRORS",
	"NVLINK_CRC_ERROR_THRESHOLD", "NVLINK_ERROR_CRITICAL", "ENFORCED_POWER_LIMIT", "MEMORY_ALLOC_HOST",
	"GPU_OP_MODE", "NO_MEMORY_CLOCKS", "NO_GRAPHICS_CLOCKS", "HAD_TO_RESTORE_STATE", "L1TAG_UNSUPPORTED",
	"L1TAG_MISCOMPARE", "ROW_REMAP_FAILURE", "UNCONTAINED_ERROR", "EMPTY_GPU_LIST", "DBE_PENDING_PAGE_RETIREMENTS",
	"UNCORRECTABLE_ROW_REMAP", "PENDING_ROW_REMAP", "BROKEN_P2P_MEMORY_DEVICE", "BROKEN_P2P_WRITER_DEVICE",
	"NVSWITCH_NVLINK_DOWN", "EUD_BINARY_PERMISSIONS", "EUD_NON_ROOT_USER", "EUD_SPAWN_FAILURE", "EUD_TIMEOUT",
	"EUD_ZOMBIE", "EUD_NON_ZERO_EXIT_CODE", "EUD_TEST_FAILED", "FILE_CREATE_PERMISSIONS", "PAUSE_RESUME_FAILED",
	"PCIE_H_REPLAY_VIOLATION", "GPU_EXPECTED_NVLINKS_UP", "NVSWITCH_EXPECTED_NVLINKS_UP", "XID_ERROR",
	"SBE_VIOLATION", "DBE_VIOLATION", "PCIE_REPLAY_VIOLATION", "SBE_THRESHOLD_VIOLATION", "DBE_THRESHOLD_VIOLATION",
	"PCIE_REPLAY_THRESHOLD_VIOLATION", "CUDA_FM_NOT_INITIALIZED", "SXID_ERROR", "GFLOPS_THRESHOLD_VIOLATION",
	"NAN_VALUE", "FABRIC_MANAGER_TRAINING_ERROR", "BROKEN_P2P_PCIE_MEMORY_DEVICE", "BROKEN_P2P_PCIE_WRITER_DEVICE",
	"BROKEN_P2P_NVLINK_MEMORY_DEVICE", "BROKEN_P2P_NVLINK_WRITER_DEVICE", "TEST_SKIPPED", "SRAM_THRESHOLD",
	"NVLINK_EFFECTIVE_BER_THRESHOLD", "FALLEN_OFF_BUS", "NVLINK_SYMBOL_BER_THRESHOLD", "IMEX_UNHEALTHY",
	"FABRIC_PROBE_STATE", "BINARY_PERMISSIONS", "GPU_RECOVERY_RESET", "GPU_RECOVERY_REBOOT", "GPU_RECOVERY_DRAIN_P2P",
	"GPU_RECOVERY_DRAIN_RESET", "NCCL_ERROR", "RETEST_REQUESTED", "CONTAINED_ERROR", "UNCORRECTABLE_ROW_REMAP_LIMIT",
}

// String is the code's DCGM name, e.g. "DCGM_FR_FALLEN_OFF_BUS (120)".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return fmt.Sprintf("DCGM_FR_%s (%d)", codeNames[c], int(c))
	}
	return fmt.Sprintf("DCGM error code %d", int(c))
}

// grading says how DCGM's health watch (modules/health/DcgmHealthWatch.cpp)
// grades the incidents of a code, which decides the severity nodemend gives
// each one (see severityOf).
type grading int

const (
	// warns: the health watch only ever reports the code as a warning.
	warns grading = iota
	// fails: the health watch only ever reports the code as a failure.
	fails
	// graded: the same code can be a warning or a failure; the incident's
	// own grade (as dcgmi prints it for its system) decides.
	graded
)

// healthCode is a code the health watch of DCGM 4.6 emits, with the message
// formats it prints (dcgm_errors.h DCGM_FR_*_MSG, and the 3.x wording where
// it differed): dcgmi's JSON output of a health check carries only the
// message, so the code is recovered from it.
type healthCode struct {
	code    Code
	grading grading
	formats []string
}

// healthCodes are the codes DcgmHealthWatch.cpp (DCGM 4.6) reports, with the
// grade it gives each.
var healthCodes = []healthCode{
	{3, warns, []string{"Detected more than %u PCIe replays per minute for GPU %u : %d"}},
	{4, fails, []string{"Detected %d volatile double-bit ECC error(s) in GPU %u."}},
	{6, warns, []string{"A pending retired page has been detected in GPU %u."}},
	{7, fails, []string{"%u or more retired pages have been detected in GPU %u. "}},
	{8, fails, []string{"An excess of %u retired pages due to DBEs have been detected and more than one page has been retired due to DBEs in the past week in GPU %u."}},
	{9, warns, []string{"A corrupt InfoROM has been detected in GPU %u."}},
	{10, warns, []string{"Detected clocks event due to thermal violation in GPU %u.", "Detected clock throttling due to thermal violation in GPU %u."}},
	{11, warns, []string{"Cannot reliably read the power usage for GPU %u."}},
	{12, warns, []string{"Detected clocks event due to power violation in GPU %u.", "Detected clock throttling due to power violation in GPU %u."}},
	{13, warns, []string{"Detected %ld %s NvLink errors on GPU %u's NVLink which exceeds threshold of %u"}},
	{14, fails, []string{"GPU %u's NvLink link %d is currently down"}},
	{15, fails, []string{"Detected fatal errors on NvSwitch %u link %u"}},
	{16, warns, []string{"Detected nonfatal errors on NvSwitch %u link %u"}},
	// Fabric health mask bits (failures) and ConnectX health (graded by
	// the words DCGM writes, see severityOf).
	{CodeFieldViolation, graded, []string{"Detected %ld %s for GPU %u", "ConnectX entity Id:%u %s"}},
	// CPU temperature over the warning (warn) or critical (fail) threshold,
	// CPU power over its limit (fail).
	{36, graded, []string{"Detected %.1f %s for %s:%u which is above the threshold %.1f", "Detected %.1f %s for GPU %u which is above the threshold %.1f"}},
	{52, fails, []string{"Found %lld faulty memory elements on GPU %u"}},
	{70, fails, []string{"%.1f %s NvLink errors found occuring per second on GPU %u, exceeding the limit of 100 per second."}},
	{CodeNVLinkCritical, graded, []string{"Detected %ld %s NvLink errors on GPU %u's NVLink (should be 0)"}},
	{80, fails, []string{"GPU %u had uncorrectable memory errors and row remapping failed."}},
	{81, fails, []string{"GPU had an uncontained error (XID 95)"}},
	{CodeXID, graded, []string{"Detected XID %u for GPU %u"}},
	{119, fails, []string{"Detected effective BER %.2e exceeds minimum threshold on GPU %u's NVLink."}},
	{120, fails, []string{"GPU %d has fallen off the bus"}},
	{121, fails, []string{"Detected symbol BER %.2e exceeds minimum threshold on GPU %u's NVLink."}},
	{CodeIMEXUnhealthy, fails, []string{"IMEX %s status is %s (%s)"}},
	{CodeFabricProbe, graded, []string{"GPU %u: Fabric State is %s (%lld)."}},
	{125, fails, []string{"GPU %u requires a reset to recover from a fault. Recovery action: %ld (GPU_RESET)."}},
	{126, fails, []string{"GPU %u fault may have left the OS in an inconsistent state. Recovery action: %ld (NODE_REBOOT)."}},
	{127, warns, []string{"GPU %u requires peer-to-peer traffic to be quiesced. Recovery action: %ld (DRAIN_P2P)."}},
	{128, fails, []string{"GPU %u operating at reduced capacity due to a fault. Recovery action: %ld (DRAIN_AND_RESET)."}},
	{131, warns, []string{"GPU had a contained error."}},
	{132, warns, []string{"GPU %u exceeded uncorrectable row remap limit with %u remapped rows"}},
}

// devastatingXIDs are the XIDs DCGM's health watch reports as
// DCGM_FR_XID_ERROR failures whatever system is watched
// (DcgmHealthWatch::BuildXidMappings); the other XIDs it maps to
// DCGM_FR_XID_ERROR are warnings of one subsystem.
var devastatingXIDs = map[int]bool{48: true, 74: true, 119: true, 120: true, 140: true}

// matcher is a compiled message format.
type matcher struct {
	code Code
	// lead is the format's literal start up to its first space,
	// punctuation or verb: a cheap test before the regexp (most words of a
	// message start no format).
	lead string
	// number: the format starts with a numeric verb.
	number bool
	re     *regexp.Regexp
	// literal is the format's literal text length: more specific formats
	// are tried first ("Detected %ld %s for GPU %u" matches the start of
	// many messages).
	literal int
}

// matchers are the compiled formats, most specific first. They are compiled
// on the first dcgmi message, not at program start: ~600 KB of regexps and
// 3,000 allocations that every agent paid at init, though most nodes have no
// DCGM host engine and never parse a health message.
var matchers = sync.OnceValue(compileMatchers)

func compileMatchers() []matcher {
	var ms []matcher
	for _, h := range healthCodes {
		for _, f := range h.formats {
			re, lit := formatRegexp(f)
			lead := f
			if i := strings.IndexAny(lead, " .,/%"); i >= 0 {
				lead = lead[:i]
			}
			number := lead == "" && strings.HasPrefix(f, "%") && !strings.HasPrefix(f, "%s")
			ms = append(ms, matcher{code: h.code, lead: lead, number: number, re: re, literal: lit})
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].literal > ms[j].literal })
	return ms
}

var printfVerb = regexp.MustCompile(`%[-+ #0]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|z|j|t)?[diufeEgGsc%]`)

// formatRegexp turns a printf format into a regexp anchored at the start of
// a message, and returns the length of its literal text. The literal text
// is matched leniently: dcgmi wraps long health messages into 54-character
// lines and drops the '.', ',' or '/' it breaks at (dcgmi/Health.cpp
// AddErrorMessage), so those may be missing or replaced by the space the
// lines are joined with.
func formatRegexp(format string) (*regexp.Regexp, int) {
	var b strings.Builder
	b.WriteString(`^`)
	literal := 0
	writeLiteral := func(s string) {
		for _, r := range s {
			literal++
			switch r {
			case '.', ',', '/':
				b.WriteString(`[.,/ ]?`)
			case ' ':
				b.WriteString(` ?`)
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
	}
	rest := format
	for {
		loc := printfVerb.FindStringIndex(rest)
		if loc == nil {
			writeLiteral(rest)
			break
		}
		writeLiteral(rest[:loc[0]])
		verb := rest[loc[0]:loc[1]]
		switch verb[len(verb)-1] {
		case '%':
			writeLiteral("%")
		case 'd', 'i', 'u', 'c':
			b.WriteString(`-?[0-9]+`)
		case 'f', 'e', 'E', 'g', 'G':
			b.WriteString(`(?:[-+]?[0-9]+(?:[.,/ ]?[0-9]+)?(?:[eE][-+]?[0-9]+)?|-?nan|-?inf)`)
		case 's':
			b.WriteString(`.*?`)
		}
		rest = rest[loc[1]:]
	}
	return regexp.MustCompile(b.String()), literal
}

// recognize returns the code whose message format matches text at its start.
func recognize(text string) (Code, bool) {
	if text == "" {
		return 0, false
	}
	digit := text[0] >= '0' && text[0] <= '9' || text[0] == '-'
	for _, m := range matchers() {
		if (m.lead != "" && !strings.HasPrefix(text, m.lead)) || (m.number && !digit) {
			continue
		}
		if m.re.MatchString(text) {
			return m.code, true
		}
	}
	return 0, false
}

func gradingOf(c Code) (grading, bool) {
	for _, h := range healthCodes {
		if h.code == c {
			return h.grading, true
		}
	}
	return graded, false
}
