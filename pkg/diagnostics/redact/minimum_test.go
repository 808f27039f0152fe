package redact

import (
	"strings"
	"testing"
)

// Each length at which the redactor starts to take a bare run of
// characters for a credential, tested at exactly that length (masked) and
// one byte short of it (kept): a threshold that moves by one either way
// fails here. The vendors' token formats have the same test
// (TestFormatsAtTheirMinimumLength).
func TestCredentialsAtTheirMinimumLength(t *testing.T) {
	urlSafe := "Mq7sUU4lp5cqSpK9pz78-gv8Df3Lgd14t7fnP44c_aZ3kQ9wLm2Xp7Rt5Yb8Nc1VhGjKe"
	for _, c := range []struct {
		name       string
		at, before string // the line at the minimum and one byte short
		masked     string // the line at the minimum, as it must come out
	}{
		{"an authorization scheme's credential: 6 bytes",
			`header="Bearer Ab3xyz"`, `header="Bearer Ab3xy"`, `header="Bearer [REDACTED]"`},
		{"a lower-case run after Bearer: longer than 16 bytes (shorter is a word)",
			`header="Bearer abcdefghijklmnopq"`, `header="Bearer abcdefghijklmnop"`, `header="Bearer [REDACTED]"`},
		{"a token as a URL's user name: 16 bytes",
			"url=https://abcdefghijklmno1@host.example/x", "url=https://abcdefghijklmn1@host.example/x", "url=https://[REDACTED]@host.example/x"},
		{"a bare base64 run (an AWS secret access key): 40 bytes",
			"data " + b64(3, 40), "data " + b64(3, 39), "data " + Mask},
		{"a bare base64url run: 64 bytes",
			"id " + urlSafe[:64], "id " + urlSafe[:63], "id " + Mask},
	} {
		r := New()
		if got, n := r.String(c.at); got != c.masked || n != 1 {
			t.Errorf("%s, at the minimum: %q -> %q (%d masked), want %q", c.name, c.at, got, n, c.masked)
		}
		if got, n := r.String(c.before); got != c.before || n != 0 {
			t.Errorf("%s, one byte short: %q -> %q (%d masked), want it kept", c.name, c.before, got, n)
		}
	}
	// Below a secret name, a word is kept unless it is shaped like a token:
	// 12 bytes mixing cases and digits, or 8 digits.
	r := New()
	for v, want := range map[string]string{
		"Xk9mQ2pL7vR4": Mask, "Xk9mQ2pL7vR": "Xk9mQ2pL7vR",
		"abcd12345678": Mask, "abcd1234567": "abcd1234567",
	} {
		if got := r.Field([]string{"secret", "mode"}, v); got != want {
			t.Errorf("secret.mode %q -> %q, want %q", v, got, want)
		}
	}
}

// vendorMinimums are the shortest bodies of the token formats known by
// prefix and length, written out here rather than read from formats(): a
// format whose minimum moves by one either way — shorter takes words for
// tokens, longer lets a real token through — fails
// TestFormatsAtTheVendorsMinimum, which TestFormatsAtTheirMinimumLength
// (which takes the minimum from the format itself) cannot see.
var vendorMinimums = map[string]int{
	"aws-access-key-id": 16, "aws-temporary-key-id": 16, "aws-bearer-key-id": 16, "aws-context-key-id": 16,
	"aws-key-id": 17, "github-pat": 36, "github-oauth": 36, "github-user-to-server": 36,
	"github-server-to-server": 36, "github-refresh": 36, "github-fine-grained-pat": 22, "gitlab-pat": 20,
	"gitlab-deploy": 20, "gitlab-runner": 20, "gitlab-pipeline-trigger": 20, "gitlab-ci-job": 20,
	"gitlab-incoming-mail": 20, "gitlab-agent": 20, "gitlab-scim": 20, "gitlab-feed": 20,
	"gitlab-runner-registration": 20, "slack-bot": 10, "slack-user": 10, "slack-app": 10, "slack-refresh": 10,
	"slack-session": 10, "slack-config": 10, "slack-app-level": 10, "slack-webhook": 20, "stripe-secret": 16,
	"stripe-test-secret": 16, "stripe-restricted": 16, "stripe-test-restricted": 16, "stripe-webhook-secret": 16,
	"google-api-key": 35, "google-oauth-access": 20, "google-oauth-client-secret": 20, "npm": 36, "pypi": 20,
	"docker-hub-pat": 20, "vault-service": 20, "vault-batch": 20, "vault-recovery": 20, "digitalocean-pat": 64,
	"digitalocean-oauth": 64, "digitalocean-refresh": 64, "anthropic": 20, "openai-project": 20,
	"huggingface": 30, "shopify-access": 32, "shopify-shared-secret": 32, "age-secret-key": 58,
	"grafana-service-account": 32, "grafana-cloud": 32, "newrelic-user": 27, "databricks": 32,
	"twilio-api-key": 32, "mailgun": 32, "atlassian": 50, "tailscale": 20, "docker-swarm-join": 40,
	"sentry-org": 40, "sentry-user": 40, "pulumi": 40, "linear": 40, "crypt-md5": 8, "crypt-bcrypt-2a": 8,
	"crypt-bcrypt-2b": 8, "crypt-bcrypt-2y": 8, "crypt-sha256": 8, "crypt-sha512": 8, "crypt-yescrypt": 8,
	"crypt-gost-yescrypt": 8, "crypt-scrypt": 8, "crypt-apr1": 8, "argon2id": 8, "argon2i": 8,
}

func TestFormatsAtTheVendorsMinimum(t *testing.T) {
	r := New()
	for _, f := range lengthFormats(t) {
		n, ok := vendorMinimums[f.name]
		if !ok {
			t.Errorf("%s: no minimum in vendorMinimums", f.name)
			continue
		}
		a := alphabetBytes(f.alphabet)
		for _, c := range []byte{a[0], a[len(a)-1]} {
			body := strings.Repeat(string(c), n)
			if got, _ := redactAll(r, "using "+f.prefix+body+" now"); got != "using "+Mask+" now" {
				t.Errorf("%s with a body of %d bytes: %q", f.name, n, got)
			}
			if s, e := f.match([]byte("using "+f.prefix+body[1:]+" now"), len("using ")); e > 0 {
				t.Errorf("%s matched a body of %d bytes (%d..%d), one under its minimum", f.name, n-1, s, e)
			}
		}
	}
}
