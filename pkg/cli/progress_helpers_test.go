package cli

import (
	"io"

	"nodemend.dev/nodemend/pkg/cli/progress"
)

// NewProgress shows plain progress lines on w.
func NewProgress(w io.Writer, nodes []string) *Progress {
	return &Progress{b: progress.New(w, nodes, progress.Options{})}
}
