package cli

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/resource"

	"nodemend.dev/nodemend/pkg/cli/explain"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

func parseQuantity(s string) (resource.Quantity, error) { return resource.ParseQuantity(s) }

// renderExplain prints the object, then each finding: cause, evidence, fix.
// Findings quote the API (events, conditions, messages): every string is
// shown through termsafe.
func renderExplain(w io.Writer, p Palette, r explain.Report) error {
	safe := termsafe.String
	fmt.Fprintf(w, "%s: %s\n", p.Paint(Bold, safe(r.Object)), safe(r.Summary))
	for _, f := range r.Findings {
		fmt.Fprintln(w)
		mark, style := "•", Plain
		if f.Blocking {
			mark, style = "✗", Red
		}
		fmt.Fprintf(w, "%s %s  %s\n", p.Paint(style, mark), p.Paint(Bold, safe(f.Cause)), p.Paint(Dim, "["+safe(f.Source)+"]"))
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "    %s\n", p.Paint(Dim, safe(e)))
		}
		fmt.Fprintf(w, "  %s %s\n", p.Paint(Green, "fix:"), safe(f.Fix))
	}
	return nil
}
