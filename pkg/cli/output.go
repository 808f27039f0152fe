package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/pkg/cli/progress"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// Progress is a command's progress over nodes (pkg/cli/progress): a live
// block redrawn in place on a terminal, one line per change otherwise.
type Progress struct{ b *progress.Board }

// Progress modes (--progress).
const (
	ProgressAuto  = "auto"
	ProgressLive  = "live"
	ProgressPlain = "plain"
)

// newProgress shows progress on w in mode: auto is live on a terminal
// (not TERM=dumb), plain lines elsewhere.
func newProgress(w io.Writer, nodes []string, mode string) (*Progress, error) {
	opts := progress.Options{}
	f, isFile := w.(*os.File)
	switch mode {
	case ProgressAuto, "":
		opts.Live = isFile && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb"
	case ProgressLive:
		opts.Live = true
	case ProgressPlain:
	default:
		return nil, fmt.Errorf("--progress %q: want auto, live or plain", mode)
	}
	if isFile {
		opts.Size = func() (int, int) {
			if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
				return w, h
			}
			return 100, 24
		}
	}
	return &Progress{b: progress.New(w, nodes, opts)}, nil
}

// Update reports node's phase ("validating", "collecting", "downloading")
// with a detail; the display escapes terminal controls (details quote the
// API: a capture's message, a file name).
func (p *Progress) Update(node, phase, format string, args ...any) {
	p.b.Update(node, phase, fmt.Sprintf(format, args...))
}

// Tick reports a counter of node's phase (collectors done, packets,
// bytes): in plain mode printed at most every few seconds.
func (p *Progress) Tick(node, phase, format string, args ...any) {
	p.b.Tick(node, phase, fmt.Sprintf(format, args...))
}

// Finish reports node's outcome ("saved", "uploaded", "failed").
func (p *Progress) Finish(node, phase string, failed bool, format string, args ...any) {
	p.b.Finish(node, phase, fmt.Sprintf(format, args...), failed)
}

// Close shows the final state and the summary.
func (p *Progress) Close() { p.b.Close() }

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
