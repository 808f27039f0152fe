package redact

import (
	"bytes"
	"encoding/base64"
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

func TestLine(t *testing.T) {
	r := New()
	cases := []struct{ name, in, want string }{
		// Nothing to hide: copied as is.
		{"plain", "kubelet started in 3s", "kubelet started in 3s"},
		{"empty", "", ""},
		{"flags without secrets", "--authorization-mode=Webhook --authentication-token-webhook=true", "--authorization-mode=Webhook --authentication-token-webhook=true"},
		{"path to a key", "--tls-private-key-file=/var/lib/kubelet/pki/kubelet.key", "--tls-private-key-file=/var/lib/kubelet/pki/kubelet.key"},
		{"words that contain sig", "received signal 15, design ok", "received signal 15, design ok"},
		{"public key", "ssh_public_key=ssh-ed25519 AAAA", "ssh_public_key=ssh-ed25519 AAAA"},
		{"key comparison", "if key == other", "if key == other"},

		// Headers and tokens.
		{"bearer header", "Authorization: Bearer abcdef0123456789", "Authorization: [REDACTED]"},
		{"bearer in log", `msg="request failed" header="Bearer s3cr3tT0kenValue"`, `msg="request failed" header="Bearer [REDACTED]"`},
		{"basic", "curl -H 'authorization: Basic dXNlcjpwYXNzd29yZA=='", "curl -H 'authorization: [REDACTED]'"},
		{"jwt", "token is eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl done", "token is [REDACTED] done"},
		{"aws key id", "creds AKIAIOSFODNN7EXAMPLE used", "creds [REDACTED] used"},
		{"github token", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "[REDACTED]"},

		// key=value forms.
		{"env", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED]"},
		{"env with spaces", "DB_PASSWORD=correct horse battery", "DB_PASSWORD=[REDACTED]"},
		{"export", `export GITHUB_TOKEN="abc def"`, `export GITHUB_TOKEN="[REDACTED]"`},
		{"logfmt", `level=info api_key=abc123 user=bob`, `level=info api_key=[REDACTED] user=bob`},
		{"flag", "kubeadm join --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1234", "kubeadm join --token [REDACTED] --discovery-token-ca-cert-hash [REDACTED]"},
		{"flag equals", "--password=hunter2 --user=x", "--password=[REDACTED] --user=x"},
		{"yaml", "    token: 0123456789abcdef  # bootstrap", "    token: [REDACTED]  # bootstrap"},
		{"kubeconfig client key data", "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=", "    client-key-data: [REDACTED]"},
		{"kubeconfig cert data stays", "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=", "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM="},
		{"json", `{"name":"x","password":"p@ss\"word","n":1}`, `{"name":"x","password":"[REDACTED]","n":1}`},
		{"escaped json", `msg="{\"apiKey\": \"abc123\"}"`, `msg="{\"apiKey\": \"[REDACTED]\"}"`},
		{"env list json", `{"name":"API_TOKEN","value":"abc123"}`, `{"name":"API_TOKEN","value":"[REDACTED]"}`},
		{"presigned url", "PUT https://b.s3.amazonaws.com/x?X-Amz-Credential=AKIA/20240101&X-Amz-Signature=deadbeef&X-Amz-Security-Token=FwoG", "PUT https://b.s3.amazonaws.com/x?X-Amz-Credential=[REDACTED]&X-Amz-Signature=[REDACTED]&X-Amz-Security-Token=[REDACTED]"},
		{"sas", "https://a.blob.core.windows.net/c?sv=2020&sig=abc%2Bdef", "https://a.blob.core.windows.net/c?sv=2020&sig=[REDACTED]"},
		{"url password", "proxy http://user:hunter2@proxy.local:3128", "proxy http://user:[REDACTED]@proxy.local:3128"},
		{"one-line pem", `"key":"-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----\n"`, `"key":"[REDACTED]"`},
		{"one-line pem, no key context", `x=-----BEGIN EC PRIVATE KEY-----MHcCAQ-----END EC PRIVATE KEY-----`, `x=-----BEGIN EC PRIVATE KEY-----[REDACTED]-----END EC PRIVATE KEY-----`},
		{"certificate pem stays", "-----BEGIN CERTIFICATE-----", "-----BEGIN CERTIFICATE-----"},
		{"already masked", "token=[REDACTED]", "token=[REDACTED]"},
		{"docker auth", `{"auths":{"r.io":{"auth":"dXNlcjpwYXNz"}}}`, `{"auths":{"r.io":{"auth":"[REDACTED]"}}}`},
		{"toml auth", `  auth = "dXNlcjpwYXNz"`, `  auth = "[REDACTED]"`},
		{"authentication stays", "authentication: webhook", "authentication: webhook"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			got, _ := r.Line(nil, []byte(tc.in), &st)
			if string(got) != tc.want {
				t.Errorf("\n in: %s\ngot: %s\nwant: %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestMultiLine(t *testing.T) {
	r := New()
	cases := []struct{ name, in, want string }{
		{"pem block", "ca ok\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabcdef\n-----END RSA PRIVATE KEY-----\nafter\n",
			"ca ok\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n[REDACTED]\n[REDACTED]-----END RSA PRIVATE KEY-----\nafter\n"},
		{"yaml env list", "env:\n- name: AWS_SECRET_ACCESS_KEY\n  value: wJalrXUtnFEMI\n- name: REGION\n  value: us-east-1\n",
			"env:\n- name: AWS_SECRET_ACCESS_KEY\n  value: [REDACTED]\n- name: REGION\n  value: us-east-1\n"},
		{"yaml block scalar", "data:\n  token: |\n    line1\n    line2\n  other: x\n",
			"data:\n  token: |\n    [REDACTED]\n    [REDACTED]\n  other: x\n"},
		{"kubeconfig", strings.Join([]string{
			"users:",
			"- name: kubelet",
			"  user:",
			"    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=",
			"    client-key-data: " + base64.StdEncoding.EncodeToString([]byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI\n-----END EC PRIVATE KEY-----\n")),
			"    token: abcdef.0123456789abcdef",
			"",
		}, "\n"), strings.Join([]string{
			"users:",
			"- name: kubelet",
			"  user:",
			"    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=",
			"    client-key-data: [REDACTED]",
			"    token: [REDACTED]",
			"",
		}, "\n")},
		{"unterminated pem stops", "-----BEGIN PRIVATE KEY-----\n" + strings.Repeat("x\n", pemMaxLines+2),
			"-----BEGIN PRIVATE KEY-----\n" + strings.Repeat("[REDACTED]\n", pemMaxLines) + "x\nx\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := redactAll(r, tc.in)
			if got != tc.want {
				t.Errorf("\n in: %q\ngot: %q\nwant: %q", tc.in, got, tc.want)
			}
		})
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

func TestWriterLongLine(t *testing.T) {
	r := New()
	long := strings.Repeat("abcdefgh ", MaxLine/9+10) + "secret=xyz123"
	got, n := redactAll(r, long)
	if strings.Contains(got, "xyz123") || n != 1 {
		t.Fatalf("secret after a cut survived (n=%d)", n)
	}
	if strings.ReplaceAll(got, "\n", "") == "" {
		t.Fatal("lost content")
	}
}

func BenchmarkWriter(b *testing.B) {
	r := New()
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		sb.WriteString("Jun 12 10:00:01 node kubelet[1034]: I0612 10:00:01.123456    1034 kubelet.go:2345] \"SyncLoop (PLEG): event for pod\" pod=\"kube-system/coredns-5d78c9869d-abcde\" event={\"ID\":\"1f2e\",\"Type\":\"ContainerStarted\"}\n")
		sb.WriteString("Jun 12 10:00:01 node containerd[812]: time=\"2024-06-12T10:00:01Z\" level=info msg=\"StartContainer for \\\"abc\\\" returns successfully\"\n")
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := r.NewWriter(ioDiscard{})
		_, _ = w.Write(data)
		_ = w.Close()
	}
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }
