package upload

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckURL(t *testing.T) {
	p := Policy{}
	allow := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	cases := []struct {
		name   string
		policy Policy
		url    string
		want   string // substring of the refusal; empty: allowed
	}{
		{"public https", p, "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=x", ""},
		{"http", p, "http://bucket.example.com/x", `scheme "http"`},
		{"file", p, "file:///etc/shadow", `scheme "file"`},
		{"gopher", p, "gopher://x/", `scheme "gopher"`},
		{"metadata IP", p, "https://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (cloud metadata endpoint)"},
		{"metadata IPv6", p, "https://[fd00:ec2::254]/latest", "fd00:ec2::254 is a cloud metadata endpoint"},
		{"loopback", p, "https://127.0.0.1:8443/x", "127.0.0.1 is a loopback address"},
		{"loopback v6", p, "https://[::1]/x", "::1 is a loopback address"},
		{"v4-mapped loopback", p, "https://[::ffff:127.0.0.1]/x", "127.0.0.1 is a loopback address"},
		{"localhost", p, "https://localhost/x", "loopback name"},
		{"private", p, "https://10.20.30.40/x", "10.20.30.40 is a private address"},
		{"private allowed", allow, "https://10.20.30.40/x", ""},
		{"other private not allowed", allow, "https://10.30.0.1/x", "private address"},
		{"credentials", p, "https://u:p@bucket.example.com/x", "credentials in the URL"},
		{"no host", p, "https:///x", "no host"},
		{"unparsable", p, "https://%zz", "not a URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.policy.CheckURL(tc.url)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	cases := []struct {
		size int64
		base time.Duration
		rate int64
		want time.Duration
	}{
		{0, 30 * time.Second, 1 << 20, 30 * time.Second},
		{100 << 20, 30 * time.Second, 1 << 20, 130 * time.Second},
		{512 << 10, time.Second, 1 << 20, 1500 * time.Millisecond},
		{1 << 30, time.Second, 0, time.Second},
	}
	for _, tc := range cases {
		if got := Timeout(tc.size, tc.base, tc.rate); got != tc.want {
			t.Errorf("Timeout(%d, %v, %d) = %v, want %v", tc.size, tc.base, tc.rate, got, tc.want)
		}
	}
}

func payload(t *testing.T, n int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// server is a TLS test server on loopback; the uploader under test is
// allowed loopback, as an agent configured for a local collector would be.
func server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *Uploader) {
	s := httptest.NewTLSServer(h)
	t.Cleanup(s.Close)
	pool := s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return s, &Uploader{Policy: Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, RootCAs: pool,
		BaseTimeout: 2 * time.Second, Backoff: 10 * time.Millisecond}
}

func TestPutStreamsAndRetries(t *testing.T) {
	var calls atomic.Int32
	var got atomic.Int64
	s, u := server(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPut || r.ContentLength != 4096 {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		got.Store(n)
	})
	n, err := u.PutFile(context.Background(), s.URL+"/b?sig=x", payload(t, 4096))
	if err != nil || n != 4096 || got.Load() != 4096 || calls.Load() != 2 {
		t.Fatalf("n=%d err=%v received=%d calls=%d", n, err, got.Load(), calls.Load())
	}
}

func TestClientErrorNotRetried(t *testing.T) {
	var calls atomic.Int32
	s, u := server(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "<Code>AccessDenied</Code><StringToSign>secret</StringToSign>", http.StatusForbidden)
	})
	_, err := u.PutFile(context.Background(), s.URL+"/b?X-Amz-Signature=deadbeef", payload(t, 10))
	if err == nil || !strings.Contains(err.Error(), "403") || calls.Load() != 1 {
		t.Fatalf("err=%v calls=%d", err, calls.Load())
	}
	if strings.Contains(err.Error(), "deadbeef") || strings.Contains(err.Error(), "StringToSign") {
		t.Fatalf("error exposes the signature or the server's answer: %v", err)
	}
}

// TestSlowServer: a server that does not take the data in the time sized
// for it fails the upload, after its retries, with a clear message.
func TestSlowServer(t *testing.T) {
	release := make(chan struct{})
	s, u := server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for handlers
	u.BaseTimeout, u.MinRate, u.Attempts = 200*time.Millisecond, 1<<20, 2
	start := time.Now()
	_, err := u.PutFile(context.Background(), s.URL+"/b?X-Amz-Signature=deadbeef", payload(t, 100<<10))
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timed out after 297.65625ms") {
		t.Fatalf("slow server: %v", err)
	}
	if took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
	if strings.Contains(err.Error(), "deadbeef") {
		t.Fatalf("error exposes the signature: %v", err)
	}
}

func TestRedirects(t *testing.T) {
	var final atomic.Int64
	s, u := server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/temporary":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect) // 307 keeps the PUT and its body
		case "/found":
			http.Redirect(w, r, "/final", http.StatusFound) // 302 turns it into a GET
		case "/to-metadata":
			http.Redirect(w, r, "https://169.254.169.254/latest/meta-data/", http.StatusTemporaryRedirect)
		case "/to-http":
			http.Redirect(w, r, "http://example.com/x", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		case "/final":
			n, _ := io.Copy(io.Discard, r.Body)
			if r.Method == http.MethodPut {
				final.Store(n)
			}
		}
	})
	if _, err := u.PutFile(context.Background(), s.URL+"/temporary", payload(t, 1000)); err != nil || final.Load() != 1000 {
		t.Fatalf("307: err=%v final got %d bytes", err, final.Load())
	}
	for path, want := range map[string]string{
		"/found":       "change the PUT into a GET",
		"/to-metadata": "169.254.169.254 is a link-local address",
		"/to-http":     `scheme "http"`,
		"/loop":        "more than 3 redirects",
	} {
		_, err := u.PutFile(context.Background(), s.URL+path, payload(t, 10))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal with %q", path, err, want)
		}
	}
}

// TestDialTimeCheck: the dialer's check sees the address being connected
// to, whatever name led there (a name resolving to 169.254.169.254 or to
// loopback is refused when dialed).
func TestDialTimeCheck(t *testing.T) {
	u := &Uploader{Policy: Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}}
	for addr, want := range map[string]string{
		"127.0.0.1:443":      "loopback address",
		"[::1]:443":          "loopback address",
		"169.254.169.254:80": "cloud metadata endpoint",
		"[fe80::1%eth0]:443": "link-local address",
		"192.168.1.10:443":   "private address",
		"10.9.1.1:443":       "",
		"93.184.216.34:443":  "",
		"[2606:4700::1]:443": "",
	} {
		err := u.control("tcp", addr, nil)
		if (want == "") != (err == nil) || (want != "" && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", addr, err, want)
		}
	}
	// End to end: a loopback server with loopback refused.
	s, up := server(t, func(http.ResponseWriter, *http.Request) {})
	up.Policy = Policy{}
	if _, err := up.PutFile(context.Background(), s.URL+"/x", payload(t, 10)); !errors.Is(err, ErrRefused) {
		t.Fatalf("loopback server with loopback refused: %v", err)
	}
}
