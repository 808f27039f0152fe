package cli

import (
	"io"
	"os"

	"golang.org/x/term"
)

// Style is a text colour or weight.
type Style uint8

const (
	Plain Style = iota
	Bold
	Dim
	Red
	Green
	Yellow
	Blue
	Magenta
)

var ansi = [...]string{Plain: "", Bold: "\x1b[1m", Dim: "\x1b[2m", Red: "\x1b[31m", Green: "\x1b[32m", Yellow: "\x1b[33m", Blue: "\x1b[34m", Magenta: "\x1b[35m"}

// Palette paints text, or leaves it alone when colour is off.
type Palette struct{ on bool }

// Paint wraps s in the style's escape codes when colour is on.
func (p Palette) Paint(st Style, s string) string {
	if !p.on || st == Plain || s == "" {
		return s
	}
	return ansi[st] + s + "\x1b[0m"
}

// ColorMode is the --color flag: auto, always or never.
type ColorMode string

const (
	ColorAuto   ColorMode = "auto"
	ColorAlways ColorMode = "always"
	ColorNever  ColorMode = "never"
)

// UseColor decides colour: never and always as said; auto only when the
// output is a terminal and NO_COLOR (https://no-color.org) is unset or empty.
func UseColor(mode ColorMode, terminal bool, noColor string) bool {
	switch mode {
	case ColorAlways:
		return true
	case ColorNever:
		return false
	}
	return terminal && noColor == ""
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// PaletteFor is the palette for writing to w under mode.
func PaletteFor(w io.Writer, mode ColorMode) Palette {
	return Palette{on: UseColor(mode, IsTerminal(w), os.Getenv("NO_COLOR"))}
}
