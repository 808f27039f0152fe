package cli

import (
	"io"
	"strings"
	"unicode/utf8"

	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// Cell is one table cell: its text and, when colour is on, its style.
type Cell struct {
	Text  string
	Style Style
}

// Table lays out rows in aligned columns. It measures the visible text, so
// that colour escapes (which text/tabwriter would count) never shift a
// column.
type Table struct {
	header []string
	rows   [][]Cell
}

// NewTable starts a table with a header row.
func NewTable(header ...string) *Table { return &Table{header: header} }

// Row adds a row of plain cells.
func (t *Table) Row(cells ...Cell) { t.rows = append(t.rows, cells) }

// Len is the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// Write renders the table with p's colours; the last column is not padded.
// Cells are shown through termsafe: they hold strings from the API.
func (t *Table) Write(w io.Writer, p Palette) error {
	rows := make([][]Cell, len(t.rows))
	for i, r := range t.rows {
		rows[i] = make([]Cell, len(r))
		for j, c := range r {
			rows[i][j] = Cell{Text: termsafe.String(c.Text), Style: c.Style}
		}
	}
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c.Text))
			}
		}
	}
	var b strings.Builder
	line := func(cells []Cell) {
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(p.Paint(c.Style, c.Text))
			if i < len(cells)-1 && i < len(widths) {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.Text)))
			}
		}
		// Trailing spaces from an empty last cell are trimmed, as kubectl does.
		s := strings.TrimRight(b.String(), " ")
		b.Reset()
		b.WriteString(s)
		b.WriteByte('\n')
		_, _ = io.WriteString(w, b.String())
		b.Reset()
	}
	head := make([]Cell, len(t.header))
	for i, h := range t.header {
		head[i] = Cell{Text: h, Style: Bold}
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
	return nil
}
