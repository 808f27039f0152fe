package redact

import (
	"bytes"
	"strings"
	"testing"
)

// redactCut redacts text through a Writer whose lines are cut at maxLine,
// written in chunks of the given size.
func redactCut(r *Redactor, text string, maxLine, chunk int) string {
	var out bytes.Buffer
	w := r.NewWriter(&out)
	w.maxLine = maxLine
	in := []byte(text)
	for len(in) > 0 {
		n := min(max(chunk, 1), len(in))
		if _, err := w.Write(in[:n]); err != nil {
			panic(err)
		}
		in = in[n:]
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return out.String()
}

// FuzzStable: any input is handled without panic, and redaction is stable:
// redacting redacted text changes nothing (the mask is never taken for a
// secret, and nothing is exposed by the first pass).
func FuzzStable(f *testing.F) {
	for _, tc := range allCases() {
		f.Add(tc.in)
	}
	r := New()
	f.Fuzz(func(t *testing.T, in string) {
		once, _ := redactAll(r, in)
		twice, n := redactAll(r, once)
		if once != twice {
			t.Fatalf("not stable:\n in: %q\n1st: %q\n2nd: %q (%d more)", in, once, twice, n)
		}
	})
}

// secretForms are shapes in which a secret of any token-like value must be
// removed; %s is the secret.
func secretForms() []string {
	return []string{
		"Authorization: Bearer %s",
		"proxy-authorization: basic %s",
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
		"kubelet --bootstrap-token %s --v=2",
		"https://admin:%s@registry.local/v2",
		"redis://:%s@cache:6379/0",
		`{"name":"MY_API_KEY","value":"%s"}`,
		"env:\n- name: DB_PASSWORD\n  value: %s",
		"https://bucket/o?X-Amz-Signature=%s&a=b",
		"X-Auth-Token: %s",
		"Cookie: theme=dark; sid=%s",
		"curl -u bob:%s https://x",
		"mysql -uroot -p%s db",
		"sshpass -p %s ssh root@h",
		"<password>%s</password>",
		`<add key="ApiKey" value="%s"/>`,
		"password = \"%s\"",
		"machine h login u password %s",
		"db:5432:app:u:%s",
		"Environment=\"DB_PASSWORD=%s\" \"B=1\"",
		"app:%s@tcp(db:3306)/x",
		"vault_auth_token: %s",
		"signingKey: %s",
		"PrivateKey = %s",
		"auth:\n  - %s",
		"key: |\n  %s",
		"  oauth2ClientSecret: >-\n    %s",
	}
}

// FuzzSecretsDoNotSurvive plants a secret in every form, between arbitrary
// lines, with lines cut at an arbitrary length, and checks that no 8
// characters of it come out.
func FuzzSecretsDoNotSurvive(f *testing.F) {
	f.Add("level=info", "s3cr3tV4lue", "done", uint8(0), uint16(0))
	f.Add("", "abcdefgh", "", uint8(3), uint16(7))
	f.Add("a b", "x.y_z-0123", " c", uint8(9), uint16(300))
	r := New()
	forms := secretForms()
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, form uint8, cut uint16) {
		if len(secret) < 8 || len(secret) > 64 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~+/-") != "" {
			return // secrets are token-like
		}
		if isNotSecretValue([]byte(secret)) || strings.HasPrefix(secret, "-") || strings.ContainsAny(prefix+suffix, "\r") {
			return
		}
		for i := 0; i+8 <= len(secret); i++ {
			if strings.Contains(prefix+suffix, secret[i:i+8]) {
				return // the surrounding text has it anyway
			}
		}
		// The planted lines stand on their own lines, between arbitrary ones.
		in := prefix + "\n" + strings.Replace(forms[int(form)%len(forms)], "%s", secret, 1) + "\n" + suffix
		maxLine := 64 + int(cut)
		out := redactCut(r, in, maxLine, 1+int(cut)%97)
		for i := 0; i+8 <= len(secret); i++ {
			if strings.Contains(out, secret[i:i+8]) {
				t.Fatalf("%q of the secret survived:\n in: %q\nout: %q", secret[i:i+8], in, out)
			}
		}
	})
}
