// Package logline defines the one record type that every log source (kmsg,
// journal, file tailer) hands to the rule matcher.
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
	// Unit is the systemd unit (journal _SYSTEMD_UNIT, or SYSLOG_IDENTIFIER when
	// there is no unit) for journal lines, the path for file lines, empty for kmsg.
	Unit string
	// Text is the message, with invalid UTF-8 replaced and capped in length by
	// the source.
	Text string
	// Time is the source timestamp: when the record was produced, as well as the
	// source can tell (kernel time converted to wall clock, journal realtime).
	Time time.Time
}
