package redact

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzLine: any input is handled without panic, and redaction is stable:
// redacting redacted text changes nothing (the mask is never taken for a
// secret, nothing new is exposed by the first pass).
func FuzzLine(f *testing.F) {
	for _, s := range []string{
		"", "token=abc", "Authorization: Bearer abcdefgh", `{"name":"API_TOKEN","value":"x"}`,
		"-----BEGIN PRIVATE KEY-----x-----END PRIVATE KEY-----", "https://u:p@h/", "key: |", "--password  x",
		"eyJhbGciOi.eyJzdWIi.sig", "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVk", `\"secret\": \"v\"`, "AKIAIOSFODNN7EXAMPLE",
	} {
		f.Add(s)
	}
	r := New()
	f.Fuzz(func(t *testing.T, in string) {
		if strings.ContainsAny(in, "\n") {
			return
		}
		var st1, st2 State
		once, _ := r.Line(nil, []byte(in), &st1)
		twice, n := r.Line(nil, once, &st2)
		if !bytes.Equal(once, twice) {
			t.Fatalf("not stable:\n in: %q\n1st: %q\n2nd: %q (%d more)", in, once, twice, n)
		}
	})
}

// secretForms are the shapes in which the issue requires secrets to be
// removed; %s is the secret.
var secretForms = []string{
	"Authorization: Bearer %s",
	"authorization: basic %s",
	"AWS_SECRET_ACCESS_KEY=%s",
	"export DB_PASSWORD=%s",
	"GITHUB_TOKEN=\"%s\"",
	"    client-key-data: %s",
	"    token: %s",
	"    password: '%s'",
	`{"apiKey":"%s"}`,
	`msg="{\"secret\": \"%s\"}"`,
	"--token=%s",
	"--password %s",
	"https://admin:%s@registry.local/v2",
	`{"name":"MY_API_KEY","value":"%s"}`,
	"https://bucket/o?X-Amz-Signature=%s&a=b",
}

// FuzzSecretsDoNotSurvive plants a secret in every required form, between
// arbitrary text, and checks it never comes out.
func FuzzSecretsDoNotSurvive(f *testing.F) {
	f.Add("level=info", "s3cr3tV4lue", "done", uint8(0))
	f.Add("", "abcdefgh", "", uint8(3))
	f.Add("a b", "x.y_z-0123", " c", uint8(9))
	r := New()
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, form uint8) {
		if len(secret) < 8 || len(secret) > 64 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~+/-") != "" {
			return // secrets are token-like
		}
		if strings.Contains(prefix+suffix, secret) || strings.ContainsAny(prefix+suffix, "\n\r") {
			return
		}
		if notSecret([]byte(strings.ToLower(secret))) || strings.HasPrefix(secret, "-") {
			return
		}
		tmpl := secretForms[int(form)%len(secretForms)]
		// The planted line is on its own line, surrounded by arbitrary ones.
		in := prefix + "\n" + strings.Replace(tmpl, "%s", secret, 1) + "\n" + suffix
		out, _ := redactAll(r, in)
		if strings.Contains(out, secret) {
			t.Fatalf("secret survived:\n in: %q\nout: %q", in, out)
		}
	})
}
