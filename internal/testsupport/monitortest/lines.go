package monitortest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/rules"
	"nodemend.dev/nodemend/pkg/source/kmsg"
)

// The lines below are what the agent's readers make of each writer's
// records (pkg/source/kmsg and pkg/source/journal, whose tests parse the
// real formats): monitor tests build their lines with them, so that a rule
// is tested against the provenance its lines really have.

// Kernel is a kmsg record the kernel printed (facility 0, LOG_KERN).
func Kernel(text string, at time.Time) logline.Line { return kmsgLine(0, text, at) }

// Injected is text written to /dev/kmsg from user space (echo TEXT >
// /dev/kmsg, by root or a privileged pod): the kernel stores it with
// LOG_USER.
func Injected(text string, at time.Time) logline.Line { return kmsgLine(1, text, at) }

func kmsgLine(facility int, text string, at time.Time) logline.Line {
	// The record as a read of /dev/kmsg returns it (the kernel escapes
	// control bytes, bytes from 0x7f and the backslash as \xNN).
	var b strings.Builder
	fmt.Fprintf(&b, "%d,1,0,-;", facility<<3|4)
	for i := 0; i < len(text); i++ {
		if c := text[i]; c < ' ' || c >= 0x7f || c == '\\' {
			fmt.Fprintf(&b, `\x%02x`, c)
		} else {
			b.WriteByte(c)
		}
	}
	rec, err := kmsg.Parse([]byte(b.String()))
	if err != nil {
		panic(fmt.Sprintf("kmsg record of %q: %v", text, err))
	}
	return logline.Line{Source: logline.Kmsg, Origin: rec.Origin(), Text: rec.Message, Time: at}
}

// Unit is a journal entry of a process of unit running as root (the
// kubelet, containerd): _SYSTEMD_UNIT=unit, _UID=0.
func Unit(unit, text string, at time.Time) logline.Line {
	return logline.Line{Source: logline.Journal, Unit: unit, Text: text, Time: at,
		Origin: logline.Origin{Root: true, Transport: "stdout", PID: "2140", UID: "0", Comm: "daemon"}}
}

// Systemd is a journal entry of systemd, PID 1, about unit (UNIT=unit), or
// about itself when unit is init.scope.
func Systemd(unit, text string, at time.Time) logline.Line {
	return logline.Line{Source: logline.Journal, Unit: unit, Text: text, Time: at,
		Origin: logline.Origin{Manager: true, Root: true, Transport: "journal", PID: "1", UID: "0", Comm: "systemd"}}
}

// Forgeries are what writers other than line's can make the agent read with
// line's text: the same text written to /dev/kmsg from user space, as kmsg
// and as the journal's record of it, and journal entries of processes that
// are not root — an SSH user's `logger -t kubelet` (their session scope) and
// a pod's `logger --journald` with UNIT and SYSLOG_IDENTIFIER of its choice
// (no unit) — which may claim any unit where a sender can, never in a
// trusted field.
func Forgeries(line logline.Line) []logline.Line {
	at := line.Time
	user := func(unit, uid string) logline.Line {
		return logline.Line{Source: logline.Journal, Unit: unit, Text: line.Text, Time: at,
			Origin: logline.Origin{Transport: "syslog", PID: "4242", UID: uid, Comm: "logger"}}
	}
	injected := Injected(line.Text, at)
	journalKmsg := logline.Line{Source: logline.Journal, Text: line.Text, Time: at,
		Origin: logline.Origin{Transport: "kernel", Facility: injected.Origin.Facility}}
	return []logline.Line{injected, journalKmsg, user("session-3.scope", "1000"), user("", "65534")}
}

// NoForgeryMatches fails for each forgery (Forgeries) of the positive lines
// that a rule of rs matches, and for each that no rule reports as rejected
// although its text matches: the rules must believe only the writers that
// can produce their evidence.
func NoForgeryMatches(t *testing.T, rs []logline.Rule, positives []logline.Line) {
	t.Helper()
	m, err := rules.Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range positives {
		hits := 0
		m.Match(p, func(logline.Match) { hits++ })
		if hits == 0 {
			continue
		}
		for _, f := range Forgeries(p) {
			rejected := 0
			m.MatchOrReject(f, func(mt logline.Match) {
				t.Errorf("%s: a forgery (%s, unit %q, %+v) of %q matched", mt.Reason, f.Source, f.Unit, f.Origin, f.Text)
			}, func(string) { rejected++ })
			// A forgery read by another reader than the positive line's may
			// meet no rule of that reader at all; by the same reader, its
			// text matches, so it must be rejected.
			if rejected == 0 && f.Source == p.Source {
				t.Errorf("a forgery (%s, unit %q) of %q was not reported as rejected", f.Source, f.Unit, f.Text)
			}
		}
	}
}
