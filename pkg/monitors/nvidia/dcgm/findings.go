package dcgm

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/health"
)

// Finding is a detection of a registry reason. Severity is the grade DCGM
// gave this one detection: it may lower the reason's registry severity (a
// DCGM warning is an Event), never raise it.
type Finding struct {
	Reason   string
	Severity health.Severity
	Subject  string
	Message  string
}

// Reason names of the DCGM families (the strings of the EKS node monitoring
// agent).
const (
	healthCodePrefix = "DCGMHealthCode"
	fieldErrorPrefix = "DCGMFieldError"
)

// HealthCodeReason is the reason of a health code: DCGMHealthCode<N>. A code
// the registry does not list (a newer DCGM) is reported as
// DCGMHealthCode1, DCGM_FR_UNKNOWN.
func HealthCodeReason(c Code) string {
	name := fmt.Sprintf("%s%d", healthCodePrefix, int(c))
	if registeredHealthCodes()[name] {
		return name
	}
	return fmt.Sprintf("%s%d", healthCodePrefix, int(CodeUnknown))
}

// registeredHealthCodes are the DCGMHealthCode<N> the registry lists (looked
// up once: the registry is a generated table).
var registeredHealthCodes = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, r := range health.Reasons() {
		if strings.HasPrefix(r.Name, healthCodePrefix) {
			m[r.Name] = true
		}
	}
	return m
})

// FieldErrorReason is the reason of a degraded field: DCGMFieldError<N>.
func FieldErrorReason(f FieldID) string { return fmt.Sprintf("%s%d", fieldErrorPrefix, int(f)) }

// nvlinkLifetimeCounters are how DCGM names the pre-Blackwell NVLink error
// counters in DCGM_FR_NVLINK_ERROR_CRITICAL incidents
// (DcgmHealthWatch::MonitorNVLinkErrorFields). These counters only reset with
// the GPU, so a single historical error keeps the incident up: it says the
// link once erred, not that it is failing now (the EKS agent reports it as a
// warning for the same reason). The rate-based and Blackwell recovery-failure
// incidents of the same code stay failures.
var nvlinkLifetimeCounters = []string{
	"datalink layer CRC error counter",
	"datalink layer recovery error counter",
	"datalink layer replay error counter",
}

// severityOf is the severity of one incident: never more than DCGM's grade
// (a warning is an Event), and a Warning for the codes that do not mean a
// broken node:
//   - codes the health watch only ever reports as warnings;
//   - DCGM_FR_XID_ERROR for an XID DCGM itself grades a warning (the
//     workload-caused XIDs of one subsystem); the devastating ones keep
//     DCGM's grade;
//   - DCGM_FR_NVLINK_ERROR_CRITICAL from a lifetime counter (see above);
//   - DCGM_FR_FABRIC_PROBE_STATE: DCGM fails it for fabric manager states
//     (not started, NVML too old, unrecognized) that are no hardware fault;
//     the NVML fabric check decides NvidiaFabricError;
//   - DCGM_FR_IMEX_UNHEALTHY: the IMEX daemon is a service of multi-node
//     NVLink systems; a node is not replaced for it (the EKS agent ignores
//     it);
//   - ConnectX health status and non-fatal uncorrectable errors, which DCGM
//     grades warnings in the same code as fatal ones.
func severityOf(inc Incident) health.Severity {
	byGrade := health.Warning
	if inc.Grade == Fail {
		byGrade = health.Fatal
	}
	switch inc.Code {
	case CodeIMEXUnhealthy, CodeFabricProbe:
		return health.Warning
	case CodeNVLinkCritical:
		for _, c := range nvlinkLifetimeCounters {
			if strings.Contains(inc.Message, c) {
				return health.Warning
			}
		}
	case CodeXID:
		if inc.XID > 0 && !devastatingXIDs[inc.XID] {
			return health.Warning
		}
	case CodeFieldViolation:
		if strings.HasPrefix(inc.Message, "ConnectX") && !strings.Contains(inc.Message, "uncorrectable fatal errors") {
			return health.Warning
		}
	}
	if g, _ := gradingOf(inc.Code); g == warns {
		return health.Warning
	}
	return byGrade
}

// maxMessage bounds a finding's message; the exporter cuts events shorter.
const maxMessage = 1024

// HealthFindings maps a health check to findings: one DCGMHealthCode<N> per
// code and entity, at the worst severity among its incidents.
func HealthFindings(r HealthReport) []Finding {
	type key struct{ reason, subject string }
	byKey := map[key]*Finding{}
	var order []key
	for _, inc := range r.Incidents {
		if inc.Grade == Healthy {
			continue
		}
		sev := severityOf(inc)
		f := Finding{
			Reason:   HealthCodeReason(inc.Code),
			Severity: sev,
			Subject:  inc.Entity.Subject(),
			Message:  incidentMessage(inc),
		}
		k := key{f.Reason, f.Subject}
		prev, ok := byKey[k]
		if !ok {
			byKey[k] = &f
			order = append(order, k)
			continue
		}
		if !sev.AtMost(prev.Severity) {
			prev.Severity = sev
		}
		if !strings.Contains(prev.Message, inc.Message) && len(prev.Message) < maxMessage {
			prev.Message += "; " + inc.Message
		}
	}
	out := make([]Finding, 0, len(order))
	for _, k := range order {
		f := *byKey[k]
		f.Message = textcut.Ellipsis(f.Message, maxMessage)
		out = append(out, f)
	}
	return out
}

func incidentMessage(inc Incident) string {
	where := inc.Entity.Subject()
	if where == "" {
		where = "the node"
	}
	what := inc.Code.String()
	if !inc.Recognized {
		what = "a message nodemend does not recognize"
	}
	return fmt.Sprintf("DCGM health check, %s, %s: %s %s: %s", where, inc.System, inc.Grade, what, inc.Message)
}

// FieldFindings maps field values to DCGMFieldError<N>: the clocks event
// reasons of a GPU show a hardware slowdown (thermal, power brake, or the
// slowdown the power fast trigger engages).
func FieldFindings(rows []FieldRow) []Finding {
	var out []Finding
	for _, row := range rows {
		for _, v := range row.Values {
			if v.Blank || v.Field != FieldClocksEventReasons {
				continue
			}
			var why []string
			if v.Int&clocksHWThermal != 0 {
				why = append(why, "hardware thermal slowdown")
			}
			if v.Int&clocksHWPowerBrake != 0 {
				why = append(why, "hardware power brake slowdown")
			}
			if v.Int&clocksHWSlowdown != 0 {
				why = append(why, "hardware slowdown")
			}
			if len(why) == 0 {
				continue
			}
			out = append(out, Finding{
				Reason: FieldErrorReason(v.Field), Severity: health.Warning, Subject: row.Entity.Subject(),
				Message: fmt.Sprintf("DCGM field %d (clocks event reasons) of %s is 0x%x: %s",
					int(v.Field), row.Entity.Subject(), v.Int, strings.Join(why, ", ")),
			})
		}
	}
	return out
}

// DiagFindings maps a diagnostic run to DCGMDiagnosticFailure, one per
// entity (the node for node-wide results). A result is a Warning rather
// than Fatal when DCGM says the GPU can still run work: a 3.x "Warn", or a
// failure whose every error has DCGM severity MONITOR or CONFIG.
func DiagFindings(r DiagReport, level int) []Finding {
	type agg struct {
		sev   health.Severity
		tests []string
		first string
	}
	bySubject := map[string]*agg{}
	var order []string
	for _, f := range r.Failed() {
		sev := health.Fatal
		if f.Result.Status == DiagWarn || onlyWorkable(f.Result.Errors) {
			sev = health.Warning
		}
		s := f.Result.Entity.Subject()
		if strings.Contains(f.Result.Entity.ID, ",") {
			s = "" // a software test result for several GPUs
		}
		a, ok := bySubject[s]
		if !ok {
			a = &agg{sev: sev}
			bySubject[s] = a
			order = append(order, s)
		}
		if !sev.AtMost(a.sev) {
			a.sev = sev
		}
		a.tests = append(a.tests, f.Test.Name)
		if a.first == "" && len(f.Result.Errors) > 0 {
			e := f.Result.Errors[0]
			a.first = fmt.Sprintf("%s: %s", e.Code, strings.TrimSpace(e.Message))
		}
	}
	sort.Strings(order)
	var out []Finding
	for _, s := range order {
		a := bySubject[s]
		where := s
		if where == "" {
			where = "the node"
		}
		msg := fmt.Sprintf("DCGM diagnostic level %d failed on %s: %s", level, where, strings.Join(a.tests, ", "))
		if a.first != "" {
			msg += " (" + a.first + ")"
		}
		out = append(out, Finding{Reason: health.ReasonDCGMDiagnosticFailure, Severity: a.sev, Subject: s, Message: textcut.Ellipsis(msg, maxMessage)})
	}
	return out
}

// onlyWorkable reports whether every error is one DCGM grades as "the GPU can
// still run work" (MONITOR) or "fix the configuration" (CONFIG).
func onlyWorkable(errs []DiagError) bool {
	if len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if !e.HasSeverity || (e.Severity != SeverityMonitor && e.Severity != SeverityConfig) {
			return false
		}
	}
	return true
}
