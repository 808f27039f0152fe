package redact

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// alphabetBytes expands a character class body ("A-Za-z0-9_-") into its
// bytes.
func alphabetBytes(class string) []byte {
	var out []byte
	for i := 0; i < len(class); i++ {
		if i+2 < len(class) && class[i+1] == '-' {
			for c := class[i]; c <= class[i+2]; c++ {
				out = append(out, c)
			}
			i += 2
			continue
		}
		out = append(out, class[i])
	}
	return out
}

// lengthFormats are the formats known by prefix and length.
func lengthFormats(t *testing.T) []format {
	var fs []format
	for _, f := range formats() {
		if f.alphabet != "" {
			fs = append(fs, f)
		}
	}
	// The vendors' tokens whose bodies carry no structure to check: each
	// must be known by its prefix and length.
	for _, p := range []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "xoxa-",
		"xoxr-", "xoxs-", "xoxe-", "xapp-", "AKIA", "ASIA", "sk_live_", "npm_", "hvs.", "dckr_pat_", "hf_"} {
		found := false
		for _, f := range fs {
			found = found || f.prefix == p
		}
		if !found {
			t.Errorf("%s tokens are not known by their prefix and length", p)
		}
	}
	return fs
}

// TestFormatsAtTheirMinimumLength: a token of exactly the shortest body a
// format accepts is masked whole, whatever its body — one byte repeated, the
// least random body there is — and one byte shorter is not that format's.
func TestFormatsAtTheirMinimumLength(t *testing.T) {
	r := New()
	for _, f := range lengthFormats(t) {
		for _, c := range alphabetBytes(f.alphabet) {
			body := strings.Repeat(string(c), f.min)
			in := "using " + f.prefix + body + " now"
			if got, _ := redactAll(r, in); got != "using "+Mask+" now" {
				t.Errorf("%s at its minimum length %d (%q): %q", f.name, f.min, in, got)
			}
			short := "using " + f.prefix + body[1:] + " now"
			if s, e := f.match([]byte(short), len("using ")); e > 0 {
				t.Errorf("%s matched %q (%d..%d), one byte under its minimum length %d", f.name, short, s, e, f.min)
			}
		}
	}
}

// TestFormatsProperty: for random prefix-and-length formats, bodies of
// random length from the minimum up, drawn with little entropy (one byte
// repeated, two alternating, a short cycle) or at random, between random
// separators: neither the token nor its body survives, and a second pass
// changes nothing.
func TestFormatsProperty(t *testing.T) {
	r := New()
	fs := lengthFormats(t)
	rnd := rand.New(rand.NewPCG(36, 36))
	seps := []string{" ", "\t", `"`, "'", "=", ": ", "(", ",", "[", "\n", "<", ">", ";", "|", " -- "}
	for i := 0; i < 20000; i++ {
		f := fs[rnd.IntN(len(fs))]
		abc := alphabetBytes(f.alphabet)
		n := f.min + rnd.IntN(40)
		b := make([]byte, n)
		switch rnd.IntN(4) {
		case 0: // one byte repeated
			c := abc[rnd.IntN(len(abc))]
			for j := range b {
				b[j] = c
			}
		case 1: // two alternating
			x, y := abc[rnd.IntN(len(abc))], abc[rnd.IntN(len(abc))]
			for j := range b {
				b[j] = [2]byte{x, y}[j%2]
			}
		case 2: // a short cycle
			cyc := []byte{abc[rnd.IntN(len(abc))], abc[rnd.IntN(len(abc))], abc[rnd.IntN(len(abc))]}
			for j := range b {
				b[j] = cyc[j%3]
			}
		default:
			for j := range b {
				b[j] = abc[rnd.IntN(len(abc))]
			}
		}
		token := f.prefix + string(b)
		in := "x" + seps[rnd.IntN(len(seps))] + token + seps[rnd.IntN(len(seps))] + "y"
		got, _ := redactAll(r, in)
		if strings.Contains(got, token) || strings.Contains(got, string(b)) {
			t.Fatalf("%s: %q survived in %q", f.name, token, got)
		}
		if again, n := redactAll(r, got); again != got || n != 0 {
			t.Fatalf("%s: a second pass changed %q into %q", f.name, got, again)
		}
	}
}
