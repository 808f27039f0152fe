package nvidia

import (
	"fmt"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/pkg/health"
)

// XIDInfo is nodemend's decision about one XID: its registry reason and
// severity. docs/accelerators.md explains each; a test keeps this table, the
// registry and the docs page in agreement.
type XIDInfo struct {
	Code     int
	Reason   string
	Severity health.Severity
	Name     string
}

// XIDTable returns the classified XIDs in ascending order. The source is the
// NVIDIA XID catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
// "Resolution Bucket (Immediate Action)"): an XID resolved by a GPU reset, a
// node reboot, a power cycle or a replacement, that no workload causes, is
// Fatal; one resolved by restarting the application, or that clears by itself,
// is a Warning. XIDs absent here are reported as NvidiaXIDWarning.
func XIDTable() []XIDInfo {
	return []XIDInfo{
		{Code: 13, Reason: "NvidiaXID13Warning", Severity: health.Warning, Name: "Graphics engine exception"},
		{Code: 31, Reason: "NvidiaXID31Warning", Severity: health.Warning, Name: "GPU memory page fault"},
		{Code: 32, Reason: "NvidiaXID32Warning", Severity: health.Warning, Name: "Invalid or corrupted push buffer stream"},
		{Code: 43, Reason: "NvidiaXID43Warning", Severity: health.Warning, Name: "GPU stopped processing (channel reset)"},
		{Code: 45, Reason: "NvidiaXID45Warning", Severity: health.Warning, Name: "Preemptive cleanup"},
		{Code: 46, Reason: "NvidiaXID46Error", Severity: health.Fatal, Name: "GPU stopped processing"},
		{Code: 48, Reason: "NvidiaXID48Error", Severity: health.Fatal, Name: "Double bit ECC error"},
		{Code: 54, Reason: "NvidiaXID54Error", Severity: health.Fatal, Name: "Auxiliary power is not connected"},
		{Code: 61, Reason: "NvidiaXID61Warning", Severity: health.Warning, Name: "Internal micro-controller breakpoint/warning"},
		{Code: 62, Reason: "NvidiaXID62Error", Severity: health.Fatal, Name: "Internal micro-controller halt"},
		{Code: 63, Reason: "NvidiaXID63Warning", Severity: health.Warning, Name: "ECC page retirement or row remapping recorded"},
		{Code: 64, Reason: "NvidiaXID64Error", Severity: health.Fatal, Name: "ECC page retirement or row remapping failure"},
		{Code: 68, Reason: "NvidiaXID68Warning", Severity: health.Warning, Name: "Video decoder (NVDEC) exception"},
		{Code: 69, Reason: "NvidiaXID69Warning", Severity: health.Warning, Name: "Graphics engine class error"},
		{Code: 74, Reason: "NvidiaXID74Error", Severity: health.Fatal, Name: "NVLink error"},
		{Code: 79, Reason: "NvidiaXID79Error", Severity: health.Fatal, Name: "GPU has fallen off the bus"},
		{Code: 92, Reason: "NvidiaXID92Warning", Severity: health.Warning, Name: "High single-bit ECC error rate"},
		{Code: 94, Reason: "NvidiaXID94Warning", Severity: health.Warning, Name: "Contained ECC error"},
		{Code: 95, Reason: "NvidiaXID95Error", Severity: health.Fatal, Name: "Uncontained ECC error"},
		{Code: 109, Reason: "NvidiaXID109Error", Severity: health.Fatal, Name: "Context switch timeout"},
		{Code: 110, Reason: "NvidiaXID110Error", Severity: health.Fatal, Name: "Security fault"},
		{Code: 119, Reason: "NvidiaXID119Error", Severity: health.Fatal, Name: "GSP RPC timeout"},
		{Code: 120, Reason: "NvidiaXID120Error", Severity: health.Fatal, Name: "GSP error"},
		{Code: 121, Reason: "NvidiaXID121Warning", Severity: health.Warning, Name: "C2C link corrected error"},
		{Code: 136, Reason: "NvidiaXID136Error", Severity: health.Fatal, Name: "Critical GPU error (catalog resolution: GPU reset or reboot)"},
		{Code: 137, Reason: "NvidiaXID137Warning", Severity: health.Warning, Name: "NVLink FLA privilege error"},
		{Code: 140, Reason: "NvidiaXID140Error", Severity: health.Fatal, Name: "Unrecovered ECC error"},
		{Code: 143, Reason: "NvidiaXID143Error", Severity: health.Fatal, Name: "GPU initialization failure"},
		{Code: 154, Reason: "NvidiaXID154Warning", Severity: health.Warning, Name: "GPU recovery action changed"},
		{Code: 155, Reason: "NvidiaXID155Error", Severity: health.Fatal, Name: "Critical GPU error (catalog resolution: GPU reset or reboot)"},
		{Code: 156, Reason: "NvidiaXID156Error", Severity: health.Fatal, Name: "Critical GPU error (catalog resolution: GPU reset or reboot)"},
		{Code: 158, Reason: "NvidiaXID158Error", Severity: health.Fatal, Name: "Critical GPU error (catalog resolution: GPU reset or reboot)"},
	}
}

// LookupXID returns the table entry of code.
func LookupXID(code int) (XIDInfo, bool) {
	for _, x := range XIDTable() {
		if x.Code == code {
			return x, true
		}
	}
	return XIDInfo{}, false
}

// xidReason is the reason code an XID is reported with.
func xidReason(code int) string {
	if x, ok := LookupXID(code); ok {
		return x.Reason
	}
	return health.ReasonNvidiaXIDWarning
}

// XIDEvent is one XID report, from the kernel log or NVML.
type XIDEvent struct {
	// PCI is the GPU's PCI address as "dddd:bb:dd" (domain, bus, device),
	// the form the driver logs; "" when unknown.
	PCI  string
	Code int
	// PID and Process are the process the driver blames, when it names one.
	PID     int
	Process string
	// Detail is the rest of the message (mnemonic, channel, text).
	Detail string
}

// ParseXID parses the NVIDIA driver's XID kernel message, as printed by the
// kernel module's error logger (open-gpu-kernel-modules, nvErrorLog):
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//	NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception ...
//	NVRM: Xid (0000:03:00): 14, Channel 00000001          (drivers before 4xx)
//	NVRM: Xid (PCI:0000:01:00 GPU-I:05): 31, pid=...      (MIG instance suffix)
//
// The text may carry a "[  123.456789] " timestamp or a syslog prefix before
// "NVRM:". ok is false when text is not an XID message.
func ParseXID(text string) (ev XIDEvent, ok bool) {
	_, rest, found := strings.Cut(text, "NVRM: Xid (")
	if !found {
		return XIDEvent{}, false
	}
	inside, rest, found := strings.Cut(rest, "): ")
	if !found {
		return XIDEvent{}, false
	}
	addr := strings.TrimPrefix(inside, "PCI:")
	if i := strings.IndexByte(addr, ' '); i >= 0 {
		addr = addr[:i] // MIG "GPU-I:05" suffix
	}
	pci, pciOK := NormalizePCI(addr)
	if !pciOK {
		return XIDEvent{}, false
	}
	num, rest, _ := strings.Cut(rest, ",")
	code, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || code < 0 || code > 9999 {
		return XIDEvent{}, false
	}
	ev = XIDEvent{PCI: pci, Code: code}
	rest = strings.TrimSpace(rest)
	// Optional "pid=N, name=COMM, " fields (pid may be '<unknown>').
	if v, after, found := field(rest, "pid="); found {
		if pid, err := strconv.Atoi(strings.Trim(v, "'")); err == nil && pid > 0 {
			ev.PID = pid
		}
		rest = after
		if v, after, found := field(rest, "name="); found {
			if v != "<unknown>" {
				ev.Process = v
			}
			rest = after
		}
	}
	ev.Detail = rest
	return ev, true
}

// field cuts "key=value, rest" at the front of s.
func field(s, key string) (value, rest string, ok bool) {
	after, found := strings.CutPrefix(s, key)
	if !found {
		return "", s, false
	}
	value, rest, _ = strings.Cut(after, ",")
	return strings.TrimSpace(value), strings.TrimSpace(rest), true
}

// NormalizePCI turns the PCI addresses that the driver and NVML print into
// one form, "dddd:bb:dd" in lower case, so that a kernel XID and an NVML
// event about the same GPU have the same subject:
//
//	0000:3b:00          kernel log (domain 4 digits, bus, device)
//	00000000:3B:00.0    NVML nvmlPciInfo_t.busId (8-digit domain, function)
//	0000:3b:00.0        sysfs and lspci
func NormalizePCI(s string) (string, bool) {
	s, _, _ = strings.Cut(s, ".") // drop the function
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", false
	}
	dom, err1 := strconv.ParseUint(parts[0], 16, 32)
	bus, err2 := strconv.ParseUint(parts[1], 16, 8)
	dev, err3 := strconv.ParseUint(parts[2], 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || len(parts[0]) == 0 || len(parts[0]) > 8 ||
		len(parts[1]) > 2 || len(parts[2]) > 2 || dev > 0x1f {
		return "", false
	}
	return fmt.Sprintf("%04x:%02x:%02x", dom, bus, dev), true
}

// xidMessage is the finding message of an XID.
func xidMessage(ev XIDEvent) string {
	what := "unclassified XID"
	if x, ok := LookupXID(ev.Code); ok {
		what = x.Name
	}
	gpu := "a GPU"
	if ev.PCI != "" {
		gpu = "GPU " + ev.PCI
	}
	msg := fmt.Sprintf("XID %d (%s) on %s", ev.Code, what, gpu)
	if ev.PID > 0 {
		msg += fmt.Sprintf(", pid %d", ev.PID)
		if ev.Process != "" {
			msg += " (" + ev.Process + ")"
		}
	}
	if ev.Detail != "" {
		msg += ": " + ev.Detail
	}
	return msg
}
