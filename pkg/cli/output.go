package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
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
func (p *Progress) Update(node, phase, format string, args ...any) {
	line := fmt.Sprintf("%-11s %s", phase, fmt.Sprintf(format, args...))
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

// printStructured writes v as indented JSON or as YAML.
func printStructured(w io.Writer, format string, v any) error {
	switch format {
	case OutputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case OutputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown structured format %q", format)
}
