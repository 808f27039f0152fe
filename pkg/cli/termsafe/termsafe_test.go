package termsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"KernelReady False: fork failed":     "KernelReady False: fork failed",
		"GPU 日本語 ✓":                          "GPU 日本語 ✓",
		"\x1b[2J\x1b[Hfake prompt":           `\x1b[2J\x1b[Hfake prompt`,
		"\x1b]0;title\x07":                   `\x1b]0;title\x07`,
		"ok\rOVERWRITTEN":                    `ok\rOVERWRITTEN`,
		"line\nbreak\ttab":                   `line\nbreak\ttab`,
		"c1 \u009b31m csi":                   `c1 \u009b31m csi`,
		"raw \x9b byte":                      `raw \x9b byte`,
		"evil\u202egnp.exe":                  `evil\u202egnp.exe`,
		"\u2066isolate\u2069":                `\u2066isolate\u2069`,
		"sep\u2028arator":                    `sep\u2028arator`,
		"del\x7f":                            `del\x7f`,
		"nul\x00":                            `nul\x00`,
		"zero-width joiner 👩\u200d💻 is text": "zero-width joiner 👩\u200d💻 is text",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Text("a\n\tb\x1b[31m\r"); got != "a\n\tb\\x1b[31m\\r" {
		t.Errorf("Text kept the wrong things: %q", got)
	}
}

// Whatever goes in, nothing a terminal acts on comes out, and safe text
// is left as it is.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[2J", "\u202e", "\x9b", "日本\r\n", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := String(in)
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out of %q: %q", in, out)
		}
		for _, r := range out {
			if r < 0x20 || r == 0x7f || dangerous(r) {
				t.Fatalf("String(%q) = %q still holds %U", in, out, r)
			}
		}
		if Safe(in) && out != in {
			t.Fatalf("safe %q changed to %q", in, out)
		}
		if strings.ContainsRune(in, 0x1b) && !strings.Contains(out, `\x1b`) {
			t.Fatalf("ESC of %q not shown", in)
		}
		if Text(out) != out {
			t.Fatalf("Text changed String's output %q", out)
		}
	})
}
