package cli

import (
	"fmt"
	"io"
	"sync"
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
