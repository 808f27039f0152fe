package redact

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func redactAll(r *Redactor, text string) (string, int) {
	var out bytes.Buffer
	w := r.NewWriter(&out)
	if _, err := w.Write([]byte(text)); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return out.String(), w.Redactions()
}

// TestCases runs the whole table: innocent lines unchanged, every secret
// form masked, and masking twice changes nothing.
func TestCases(t *testing.T) {
	r := New()
	seen := map[string]bool{}
	for _, tc := range allCases() {
		if seen[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			got, n := redactAll(r, tc.in)
			if got != tc.want {
				t.Errorf("\n in: %q\ngot: %q\nwant: %q", tc.in, got, tc.want)
			}
			if want := strings.Count(tc.want, Mask) - strings.Count(tc.in, Mask); n != want {
				t.Errorf("counted %d redactions, want %d", n, want)
			}
			if again, n := redactAll(r, got); again != got || n != 0 {
				t.Errorf("a second pass changed the text (%d more):\n1st: %q\n2nd: %q", n, got, again)
			}
		})
	}
}

// TestEveryEntryIsNeeded removes each entry of every rule list in turn and
// checks that some case then fails: an entry without a case, or one whose
// cases another entry covers, is found here.
func TestEveryEntryIsNeeded(t *testing.T) {
	cases := allCases()
	fails := func(rs rules) bool {
		r := newRedactor(rs)
		for _, tc := range cases {
			if got, _ := redactAll(r, tc.in); got != tc.want {
				return true
			}
		}
		return false
	}
	if fails(defaultRules()) {
		t.Fatal("the full rules fail a case (see TestCases)")
	}
	type mutation struct {
		name   string
		mutate func(rs *rules)
	}
	var ms []mutation
	for i := range secretWords() {
		ms = append(ms, mutation{"secret word " + secretWords()[i].word, func(rs *rules) { rs.names.words = without(rs.names.words, i) }})
	}
	for i := range qualifierWords() {
		ms = append(ms, mutation{"qualifier " + qualifierWords()[i], func(rs *rules) { rs.names.qualifiers = without(rs.names.qualifiers, i) }})
	}
	for i := range publicWords() {
		ms = append(ms, mutation{"public word " + publicWords()[i], func(rs *rules) { rs.names.public = without(rs.names.public, i) }})
	}
	for i := range strongWords() {
		ms = append(ms, mutation{"strong word " + strongWords()[i], func(rs *rules) { rs.names.strong = without(rs.names.strong, i) }})
	}
	for i := range exemptNames() {
		ms = append(ms, mutation{"exempt name " + exemptNames()[i].name, func(rs *rules) { rs.names.exempt = without(rs.names.exempt, i) }})
	}
	for i := range formats() {
		ms = append(ms, mutation{"format " + formats()[i].name, func(rs *rules) { rs.formats = without(rs.formats, i) }})
	}
	for i := range cmdFlags() {
		f := cmdFlags()[i]
		ms = append(ms, mutation{fmt.Sprintf("command flag %s %s", f.tool, f.flag), func(rs *rules) { rs.flags = without(rs.flags, i) }})
	}
	for i := range authSchemes() {
		ms = append(ms, mutation{"auth scheme " + authSchemes()[i], func(rs *rules) { rs.schemes = without(rs.schemes, i) }})
	}
	for i := range dsnMarkers() {
		ms = append(ms, mutation{"DSN marker " + dsnMarkers()[i], func(rs *rules) { rs.dsn = without(rs.dsn, i) }})
	}
	for i := range publicPEMLabels() {
		ms = append(ms, mutation{"public PEM label " + publicPEMLabels()[i], func(rs *rules) { rs.pemPublic = without(rs.pemPublic, i) }})
	}
	for _, l := range []struct {
		name string
		list func(rs *rules) *[]string
	}{
		{"netrc word", func(rs *rules) *[]string { return &rs.netrcWords }},
		{"env field", func(rs *rules) *[]string { return &rs.envFields }},
		{"PEM header", func(rs *rules) *[]string { return &rs.pemHeaders }},
		{"SSH key type", func(rs *rules) *[]string { return &rs.sshKeyTypes }},
	} {
		for i, e := range *l.list(&rules{netrcWords: netrcWords(), envFields: envFields(), pemHeaders: pemHeaders(), sshKeyTypes: sshKeyTypes()}) {
			ms = append(ms, mutation{l.name + " " + e, func(rs *rules) { p := l.list(rs); *p = without(*p, i) }})
		}
	}
	for i := range structuralTriggers() {
		ms = append(ms, mutation{"trigger " + structuralTriggers()[i].lit, func(rs *rules) { rs.structural = without(rs.structural, i) }})
	}
	for _, m := range ms {
		rs := defaultRules()
		m.mutate(&rs)
		if !fails(rs) {
			t.Errorf("without %s every case still passes: give it a case of its own", m.name)
		}
	}
}

func without[T any](s []T, i int) []T {
	out := append([]T(nil), s[:i]...)
	return append(out, s[i+1:]...)
}

// TestNameParts checks the split into whole parts.
func TestNameParts(t *testing.T) {
	for in, want := range map[string]string{
		"VAULT_AUTH_TOKEN":       "vault auth token",
		"signingKey":             "signing key",
		"APIKey":                 "api key",
		"X-Auth-Token":           "x auth token",
		"oauth2ClientSecret":     "oauth 2 client secret",
		"AWSSecretAccessKey":     "aws secret access key",
		"KEYBOARD_LAYOUT":        "keyboard layout",
		"--tls-private-key-file": "tls private key file",
		"fs.s3a.secret.key":      "fs s 3 a secret key",
	} {
		var parts []string
		eachPart([]byte(in), func(p []byte) { parts = append(parts, string(p)) })
		if got := strings.Join(parts, " "); got != want {
			t.Errorf("parts of %s = %q, want %q", in, got, want)
		}
	}
}

func TestWriterSplitsWrites(t *testing.T) {
	r := New()
	in := "a=1\nTOKEN=abcdefgh\nlast line password=xyz"
	var out bytes.Buffer
	w := r.NewWriter(&out)
	for i := 0; i < len(in); i++ { // one byte at a time
		if _, err := w.Write([]byte{in[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "a=1\nTOKEN=[REDACTED]\nlast line password=[REDACTED]"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	if w.Redactions() != 2 {
		t.Fatalf("redactions = %d, want 2", w.Redactions())
	}
}

// TestWriterLongLines plants secrets around the cuts of overlong lines: a
// secret across a cut, a name before the cut and its value after, a value
// that runs to the end of the line over several pieces.
func TestWriterLongLines(t *testing.T) {
	r := New()
	const maxLine = 1 << 12
	filler := func(n int) string { return strings.Repeat("abcdefg ", n/8+1)[:n] }
	secret := "S3cr3tV4lueXyZ9q"
	for _, tc := range []struct {
		name string
		line string
	}{
		{"value after the cut", filler(maxLine-30) + ` "password": "` + secret + `" ` + filler(3*maxLine)},
		{"token across the cut", filler(maxLine-10) + " ghp_" + strings.Repeat("a1", 18) + " " + filler(3*maxLine)},
		{"key material across the cut", filler(maxLine-20) + " " + b64(9, 400) + " " + filler(3*maxLine)},
		{"whole-line value over pieces", "DB_PASSWORD=" + strings.Repeat(secret+" ", 3*maxLine/len(secret))},
		{"quoted value over the cut", filler(maxLine-8) + ` token="` + secret + strings.Repeat("x", 2*Overlap) + `" ` + filler(maxLine)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1 << 20, 777} {
				var out bytes.Buffer
				w := r.NewWriter(&out)
				w.maxLine = maxLine
				in := []byte(tc.line + "\nafter\n")
				for len(in) > 0 {
					n := min(chunk, len(in))
					if _, err := w.Write(in[:n]); err != nil {
						t.Fatal(err)
					}
					in = in[n:]
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				got := out.String()
				for _, s := range []string{secret, "ghp_a1a1a1a1", b64(9, 400)[100:108], b64(9, 400)[380:388]} {
					if strings.Contains(got, s) {
						t.Fatalf("chunk %d: %q survived", chunk, s)
					}
				}
				if !strings.HasSuffix(got, "\nafter\n") {
					t.Fatalf("chunk %d: the next line is lost: %q", chunk, got[max(0, len(got)-40):])
				}
			}
		})
	}
}

// TestContext: a key block whose BEGIN line is only in the context is masked
// in what follows; the context itself is not written.
func TestContext(t *testing.T) {
	r := New()
	body := pemBody(11, 3)
	var out bytes.Buffer
	w := r.NewWriter(&out)
	if err := w.Context([]byte("before\n  token: |\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("    wordsofasecret\n  other: x\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "    [REDACTED]\n  other: x\n"; got != want {
		t.Fatalf("yaml block in context: got %q, want %q", got, want)
	}
	out.Reset()
	w = r.NewWriter(&out)
	_ = w.Context([]byte("-----BEGIN PRIVATE KEY-----\n" + body[0] + "\n"))
	_, _ = w.Write([]byte(body[1] + "\nshort1\n-----END PRIVATE KEY-----\n"))
	_ = w.Close()
	if got, want := out.String(), Mask+"\n"+Mask+"\n-----END PRIVATE KEY-----\n"; got != want {
		t.Fatalf("pem in context: got %q, want %q", got, want)
	}
	if w.Redactions() != 2 {
		t.Fatalf("redactions = %d, want 2 (the context's are not counted)", w.Redactions())
	}
}

// TestLine is the one-line API (used for error messages).
func TestLine(t *testing.T) {
	var st State
	got, n := New().Line(nil, []byte("dial failed: password=hunter2"), &st)
	if string(got) != "dial failed: password=[REDACTED]" || n != 1 {
		t.Fatalf("got %q, %d", got, n)
	}
	if s, n := New().String("a\ntoken: x1\n"); s != "a\ntoken: [REDACTED]\n" || n != 1 {
		t.Fatalf("String: %q, %d", s, n)
	}
}
