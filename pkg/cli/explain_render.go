package cli

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/resource"

	"nodemend.dev/nodemend/pkg/cli/explain"
)

func parseQuantity(s string) (resource.Quantity, error) { return resource.ParseQuantity(s) }

// renderExplain prints the object, then each finding: cause, evidence, fix.
func renderExplain(w io.Writer, p Palette, r explain.Report) error {
	fmt.Fprintf(w, "%s: %s\n", p.Paint(Bold, r.Object), r.Summary)
	for _, f := range r.Findings {
		fmt.Fprintln(w)
		mark, style := "•", Plain
		if f.Blocking {
			mark, style = "✗", Red
		}
		fmt.Fprintf(w, "%s %s  %s\n", p.Paint(style, mark), p.Paint(Bold, f.Cause), p.Paint(Dim, "["+f.Source+"]"))
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "    %s\n", p.Paint(Dim, e))
		}
		fmt.Fprintf(w, "  %s %s\n", p.Paint(Green, "fix:"), f.Fix)
	}
	return nil
}
