// Package gpucheck is the judging half of `make gpu-check` (hack/gpu-check):
// it compares what the agent's NVIDIA paths read from real hardware with
// nvidia-smi's own answer and with the fixtures the tests use, and prints
// the table. It holds no cgo and runs no tool, so that every comparison is
// tested here, on machines without a GPU, from fixtures.
package gpucheck

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is a row's verdict.
type Status string

const (
	// Matched: the agent's path worked, and agreed with nvidia-smi or with
	// the shape of the tests' fixtures where there is one to compare with.
	Matched Status = "matched"
	// Differed: the hardware answered, but not as nvidia-smi or the fixtures
	// say: a fixture or a parser to update (the detail says what).
	Differed Status = "differed"
	// NotPresent: the hardware or tool has no such thing (no DCGM, no
	// NVLink, a field this GPU does not support).
	NotPresent Status = "not present"
	// Failed: the agent's path returned an error where it should work.
	Failed Status = "failed"
	// Skipped: not run (the reset without its flag).
	Skipped Status = "skipped"
)

// Row is one check of one subject (a GPU, or the node).
type Row struct {
	Check   string
	Subject string
	Status  Status
	Detail  string
}

// Report collects rows in the order they were checked.
type Report struct {
	Rows []Row
}

// Add appends a row.
func (r *Report) Add(check, subject string, st Status, format string, args ...any) {
	r.Rows = append(r.Rows, Row{Check: check, Subject: subject, Status: st, Detail: fmt.Sprintf(format, args...)})
}

// Count is the number of rows with status st.
func (r *Report) Count(st Status) int {
	n := 0
	for _, row := range r.Rows {
		if row.Status == st {
			n++
		}
	}
	return n
}

// OK is false when a check failed or differed: the command then exits 1,
// so that a GPU machine's run is read.
func (r *Report) OK() bool { return r.Count(Failed) == 0 && r.Count(Differed) == 0 }

// Write prints the table and a summary line.
func (r *Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSUBJECT\tRESULT\tDETAIL")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Check, row.Subject, row.Status, oneLine(row.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d matched, %d differed, %d not present, %d failed, %d skipped\n",
		r.Count(Matched), r.Count(Differed), r.Count(NotPresent), r.Count(Failed), r.Count(Skipped))
	return err
}

// oneLine keeps a table cell on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
