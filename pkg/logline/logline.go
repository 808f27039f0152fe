// Package logline defines the one record type that every log source (kmsg,
// journal, file tailer) hands to the rule matcher, and the provenance a rule
// accepts: who may have written a line it reports a fault for.
package logline

import "time"

// Source names where a line came from. Rules select lines by it.
type Source string

const (
	Kmsg    Source = "kmsg"
	Journal Source = "journal"
	File    Source = "file"
)

// Line is one log record.
type Line struct {
	Source Source
	// Unit is the systemd unit the line is attributed to, from fields its
	// writer cannot choose (journal lines; see Origin), the path for file
	// lines, empty for kmsg and for journal lines of no unit. Never the
	// sender-supplied UNIT or SYSLOG_IDENTIFIER of an ordinary process.
	Unit string
	// Origin is who wrote the line, as far as the source can prove it.
	Origin Origin
	// Text is the message, with invalid UTF-8 replaced and capped in length by
	// the source.
	Text string
	// Time is the source timestamp: when the record was produced, as well as the
	// source can tell (kernel time converted to wall clock, journal realtime).
	Time time.Time
	// Replayed marks a line read again at start, from before the reader
	// started, only to restore what counts repetitions (a reason promoted
	// when it repeats): it is no new detection.
	Replayed bool
	// Backlog marks a line that was already in the log when its reader
	// started (the kernel ring buffer's lookback): a detection like any
	// other — the agent may have been down when it was written — but one
	// whose fault may be over already (its quiet period, counted from
	// Time, passed).
	Backlog bool
}

// Origin is who wrote a line, taken only from what the writer cannot set:
// for kmsg the facility of the record's priority, which the kernel forces
// to LOG_USER (or another non-zero facility) on every record written to
// /dev/kmsg from user space (kernel/printk/printk.c, devkmsg_write), so
// facility 0 (LOG_KERN) means the kernel generated it; for the journal the
// trusted fields journald adds itself (those starting with "_", which a
// client cannot send: systemd.journal-fields(7)). The zero value proves
// nothing: every proof is a true bool.
type Origin struct {
	// Kernel: the kernel itself generated the record (kmsg facility 0, or a
	// journal entry of _TRANSPORT=kernel with facility 0).
	Kernel bool
	// Manager: written by the system service manager, systemd as PID 1
	// (journal _PID=1). Its messages about a unit carry that unit in UNIT,
	// which Line.Unit then is: PID 1 is the one sender whose UNIT is not a
	// claim.
	Manager bool
	// Root: written by a process running as root (journal _UID=0).
	Root bool

	// What follows describes the writer for people (metrics, debugging);
	// nothing is attributed by it.

	// Facility is the syslog facility of a kmsg record (0 kern, 1 user, 3
	// daemon, ...); meaningful for kmsg lines only.
	Facility int
	// Transport is journald's _TRANSPORT: kernel, journal, syslog, stdout,
	// audit, driver; empty for other sources.
	Transport string
	// PID, UID and Comm are journald's _PID, _UID and _COMM ("" when absent).
	// A process can rename itself: Comm is never evidence.
	PID, UID, Comm string
}
