package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
	"nodemend.dev/nodemend/pkg/cli/timeline"
)

var phaseStyles = map[string]Style{
	timeline.PhaseDetect:      Magenta,
	timeline.PhaseToleration:  Yellow,
	timeline.PhaseBlocked:     Red,
	timeline.PhaseDrain:       Blue,
	timeline.PhaseTerminate:   Blue,
	timeline.PhaseReplacement: Green,
	timeline.PhaseRemediate:   Blue,
	timeline.PhaseQuarantine:  Red,
}

// renderTimeline draws a header, one bar per phase on a common time axis
// (a Gantt chart), and the entries.
func renderTimeline(w io.Writer, p Palette, tl timeline.Timeline, width int, loc *time.Location) error {
	// The node, trigger, owner and replacement come from the API.
	head := "Node " + p.Paint(Bold, termsafe.String(tl.Node))
	if tl.Gone {
		head += " (gone)"
	}
	for _, kv := range [][2]string{{"trigger", tl.Trigger}, {"owner", tl.Owner}, {"replaced by", tl.Replacement}} {
		if kv[1] != "" {
			head += "   " + kv[0] + " " + termsafe.String(kv[1])
		}
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w)
	format := timeFormat(tl, loc)
	if len(tl.Phases) == 0 {
		fmt.Fprintln(w, "No repair on record: no unhealthy condition, repair annotation or repair event.")
	} else {
		start, end := tl.Phases[0].Start, tl.Phases[0].End
		for _, ph := range tl.Phases {
			start, end = minTime(start, ph.Start), maxTime(end, ph.End)
		}
		t := NewTable("PHASE", "START", "DURATION", "", "NOTE")
		for _, ph := range tl.Phases {
			dur := fleet.Short(ph.Duration)
			if ph.Ongoing {
				dur += "+"
			}
			t.Row(Cell{Text: ph.Name}, Cell{Text: ph.Start.In(loc).Format(format)}, Cell{Text: dur},
				Cell{Text: bar(ph, start, end, width), Style: phaseStyles[ph.Name]}, Cell{Text: clip(ph.Note, 80), Style: Dim})
		}
		if err := t.Write(w, p); err != nil {
			return err
		}
		ongoing := ""
		for _, ph := range tl.Phases {
			if ph.Ongoing {
				ongoing = " (still going on: ▒)"
			}
		}
		fmt.Fprintf(w, "%s total, %s → %s%s\n", fleet.Short(tl.Total), start.In(loc).Format(format), end.In(loc).Format(format), ongoing)
	}
	fmt.Fprintln(w)
	if len(tl.Entries) == 0 {
		fmt.Fprintln(w, "No events remain.")
		return nil
	}
	t := NewTable("TIME", "SOURCE", "WHAT", "MESSAGE")
	for _, e := range tl.Entries {
		what := Cell{Text: e.What}
		if e.Type == "Warning" {
			what.Style = Yellow
		}
		msg := e.Message
		if e.Count > 1 {
			msg = fmt.Sprintf("(x%d) %s", e.Count, msg)
		}
		t.Row(Cell{Text: e.Time.In(loc).Format(format)}, Cell{Text: e.Source, Style: Dim}, what, Cell{Text: clip(msg, 140)})
	}
	return t.Write(w, p)
}

// bar places a phase on the axis [start, end] of width characters: full
// blocks for a finished phase, shaded for one still going on, a thin mark
// for an instant.
func bar(ph timeline.Phase, start, end time.Time, width int) string {
	span := end.Sub(start)
	if span <= 0 {
		return "▏"
	}
	scale := float64(width) / float64(span)
	off := int(float64(ph.Start.Sub(start)) * scale)
	n := int(float64(ph.Duration)*scale + 0.5)
	off = min(off, width-1)
	n = min(n, width-off)
	fill := "█"
	if ph.Ongoing {
		fill = "▒"
	}
	if n <= 0 {
		return strings.Repeat(" ", off) + "▏"
	}
	return strings.Repeat(" ", off) + strings.Repeat(fill, n)
}

// timeFormat shows dates only when the story spans more than one day.
func timeFormat(tl timeline.Timeline, loc *time.Location) string {
	var first, last time.Time
	for _, e := range tl.Entries {
		if first.IsZero() || e.Time.Before(first) {
			first = e.Time
		}
		last = maxTime(last, e.Time)
	}
	for _, ph := range tl.Phases {
		if first.IsZero() || ph.Start.Before(first) {
			first = ph.Start
		}
		last = maxTime(last, ph.End)
	}
	if first.In(loc).YearDay() != last.In(loc).YearDay() || first.Year() != last.Year() {
		return "01-02 15:04:05"
	}
	return "15:04:05"
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
