package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// Progress prints one line per change of a node's phase or detail,
// prefixed by the node so that parallel nodes stay readable (and the output
// stays useful in logs, where redrawn lines are not).
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	width int
	last  map[string]string
}

// NewProgress writes to w; width aligns node names.
func NewProgress(w io.Writer, nodes []string) *Progress {
	width := 0
	for _, n := range nodes {
		width = max(width, len(n))
	}
	return &Progress{w: w, width: width, last: map[string]string{}}
}

// Update reports node's phase ("validating", "collecting", "downloading",
// "saved", "failed") with a detail; repeated identical updates print once.
// The line is shown through termsafe: its details hold strings from the
// API (a capture's message, a file name).
func (p *Progress) Update(node, phase, format string, args ...any) {
	node = termsafe.String(node)
	line := fmt.Sprintf("%-11s %s", phase, termsafe.String(fmt.Sprintf(format, args...)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last[node] == line {
		return
	}
	p.last[node] = line
	fmt.Fprintf(p.w, "%-*s  %s\n", p.width, node, line)
}

// HumanBytes formats a size for people.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Output formats shared by status, timeline and explain.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// checkOutput validates -o against the formats a command offers.
func checkOutput(o string, allowed ...string) error {
	if slices.Contains(allowed, o) {
		return nil
	}
	var names []string
	for _, a := range allowed {
		if a != OutputTable {
			names = append(names, a)
		}
	}
	return fmt.Errorf("-o %q: want one of %s (or nothing, for the table)", o, strings.Join(names, ", "))
}

// printStructured writes v as indented JSON or as YAML, through
// termsafe.Text: the encoders escape ESC and the other C0 controls, but
// leave C1 and bidirectional controls raw. In JSON (where they can only be
// inside strings) termsafe's \u escapes are JSON escapes, so the document
// still decodes to the exact values; in YAML they are exact inside double
// quotes and literal text elsewhere.
func printStructured(w io.Writer, format string, v any) error {
	var b []byte
	var err error
	switch format {
	case OutputJSON:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		err, b = enc.Encode(v), buf.Bytes()
	case OutputYAML:
		// Through JSON with termsafe's escapes: the YAML parser behind
		// yaml.Marshal refuses a raw C1 control in a string.
		if b, err = json.Marshal(v); err == nil {
			b, err = yaml.JSONToYAML([]byte(termsafe.Text(string(b))))
		}
	default:
		return fmt.Errorf("unknown structured format %q", format)
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, termsafe.Text(string(b)))
	return err
}

// PrintError writes err as kubectl mend's error line, through
// termsafe.Text: errors quote the API (a capture's message, a refusal).
func PrintError(w io.Writer, err error) {
	fmt.Fprintln(w, "error:", termsafe.Text(err.Error()))
}
