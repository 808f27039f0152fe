package redact

import (
	"strings"
	"testing"
)

// adversarialLines are lines that repeat one trigger (or a secret form)
// across a whole 1 MiB piece: redaction must stay linear in them.
func adversarialLines(size int) map[string]string {
	rep := func(s string) string { return strings.Repeat(s, size/len(s)+1)[:size] }
	return map[string]string{
		"names":           rep("token x "),
		"values":          rep("password=x "),
		"urls":            rep("a://"),
		"url userinfo":    rep("https://u:p@h "),
		"base64 pem":      rep("LS0tLS1CRUdJTi"),
		"pem headers":     rep("-----BEGIN X-----"),
		"pem blocks":      rep("-----BEGIN PRIVATE KEY-----MIIB-----END PRIVATE KEY-----"),
		"dsn":             rep("a:b@tcp("),
		"tool flags":      rep("-p x "),
		"formats":         rep("AKIA"),
		"jwt":             rep("eyJ"),
		"quotes":          rep(`"token": "`),
		"netrc":           rep("password x "),
		"key material":    rep(b64(3, 63) + " "),
		"bearer":          rep("Bearer Bearer1 "),
		"env names":       rep(`{"name":"API_TOKEN"} `),
		"masks":           rep("[REDACTED]"),
		"escaped":         rep(`\\\"`),
		"mixed spans":     rep("password=x " + b64(4, 48) + " "),
		"no separators":   rep("\b"),
		"one long base64": b64(5, size),
	}
}

// TestAdversarialLines runs each adversarial line through a Writer (a
// super-linear path shows as this test running out of time) and checks that
// what must be masked is.
func TestAdversarialLines(t *testing.T) {
	r := New()
	for name, line := range adversarialLines(MaxLine + MaxLine/2) {
		t.Run(name, func(t *testing.T) {
			out, _ := redactAll(r, line+"\nnext line.\n")
			if !strings.HasSuffix(out, "\nnext line.\n") {
				t.Fatalf("the next line is lost")
			}
			if strings.Contains(out, "password=x") || strings.Contains(out, "token: x") {
				t.Fatalf("a value survived")
			}
		})
	}
}

// BenchmarkAdversarial reports the throughput on each adversarial line.
func BenchmarkAdversarial(b *testing.B) {
	r := New()
	for name, line := range adversarialLines(1 << 20) {
		data := []byte(line + "\n")
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				w := r.NewWriter(discard{})
				_, _ = w.Write(data)
				_ = w.Close()
			}
		})
	}
}
