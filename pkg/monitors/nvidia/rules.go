package nvidia

import (
	"fmt"

	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
)

// xidAnchor is the literal every XID message contains.
const xidAnchor = "NVRM: Xid ("

// xidPattern checks the shape of an XID line; ParseXID extracts the fields.
// The code group lets the per-XID rules require their number exactly.
const xidPattern = `NVRM: Xid \((?:PCI:)?[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}[^)]*\): `

// Rules returns the nvidia monitor's kernel log rules: one per classified XID
// (so that each reason can be disabled or downgraded on its own), a catch-all
// for XIDs the table does not know, the driver's own "fallen off the bus"
// report, and crashes inside NCCL. Formats follow the NVIDIA XID documentation
// (docs.nvidia.com/deploy/xid-errors) and the open kernel modules' nvErrorLog.
func Rules() []logline.Rule {
	kmsg := []logline.Source{logline.Kmsg}
	kernel := []logline.Provenance{logline.ByKernel}
	var rs []logline.Rule
	for _, x := range XIDTable() {
		rs = append(rs, logline.Rule{
			Reason:   x.Reason,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{xidAnchor, fmt.Sprintf("): %d", x.Code)},
			Pattern:  xidPattern + fmt.Sprintf(`%d(?:,|$)`, x.Code),
		})
	}
	rs = append(rs,
		// Every XID line; Interpret keeps only the codes absent from the table.
		logline.Rule{
			Reason:   health.ReasonNvidiaXIDWarning,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{xidAnchor},
			Pattern:  xidPattern + `\d+(?:,|$)`,
		},
		// The driver's own report, printed with (and on some paths without)
		// XID 79:
		//   "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
		logline.Rule{
			Reason:   health.ReasonNvidiaXID79Error,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"NVRM: GPU ", ": GPU has fallen off the bus"},
			Pattern:  `NVRM: GPU (?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?): GPU has fallen off the bus`,
		},
		// arch/x86/mm/fault.c show_signal_msg() naming the faulting library:
		//   "python[4242]: segfault at 8 ip 00007f... sp 00007ff... error 4 in libnccl.so.2.21.5[7f...+...]"
		logline.Rule{
			Reason:   health.ReasonNvidiaNCCLError,
			Sources:  kmsg,
			Accept:   kernel,
			Contains: []string{"]: segfault at ", " in libnccl"},
			Pattern:  `^(?P<comm>.+)\[(?P<pid>\d+)\]: segfault at [0-9a-f]+ ip .* in libnccl`,
			Message:  "${comm} (PID ${pid}) crashed inside NCCL (libnccl)",
		},
	)
	return rs
}

// interpret turns a rule match into findings. Pure: it reads only the match.
func interpret(m logline.Match) []findingSpec {
	switch m.Reason {
	case health.ReasonNvidiaNCCLError:
		return []findingSpec{{reason: m.Reason, message: m.Message, subject: m.Groups["comm"]}}
	case health.ReasonNvidiaXID79Error:
		if pci, ok := NormalizePCI(m.Groups["pci"]); ok {
			return []findingSpec{{reason: m.Reason, subject: pci,
				message: fmt.Sprintf("XID 79 (GPU has fallen off the bus) on GPU %s", pci)}}
		}
	}
	ev, ok := ParseXID(m.Line.Text)
	if !ok {
		return nil
	}
	reason := xidReason(ev.Code)
	if reason != m.Reason {
		// The catch-all rule also matches classified XIDs: their own rule
		// reports them.
		return nil
	}
	return []findingSpec{{reason: reason, message: xidMessage(ev), subject: ev.PCI}}
}

// findingSpec is a finding before the monitor adds the observation time.
type findingSpec struct{ reason, message, subject string }
