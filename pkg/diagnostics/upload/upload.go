// Package upload delivers bundles and capture chunks to HTTPS URLs (such as
// pre-signed object-store PUT URLs) without letting a NodeDiagnostic turn
// the agent into a way into the node's network: only https; loopback,
// link-local (the cloud metadata endpoint 169.254.169.254), private and
// other special ranges are refused unless the agent's configuration allows
// them; the check is made on the address actually dialed (so DNS cannot
// point a harmless name at a refused address) and again on every redirect;
// no proxy from the environment is used. Uploads are streamed from disk,
// retried on transient failures, and bounded by a timeout sized to the
// payload.
package upload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"syscall"
	"time"
)

// Uploader PUTs files to URLs.
type Uploader struct {
	Policy Policy
	// RootCAs verify servers; nil means the system roots.
	RootCAs *x509.CertPool
	// BaseTimeout and MinRate size an attempt's timeout: BaseTimeout plus
	// the time to send the payload at MinRate bytes/s (defaults 30s, 1 MiB/s).
	BaseTimeout time.Duration
	MinRate     int64
	// Attempts (default 3) and Backoff (default 2s, doubled each time).
	Attempts int
	Backoff  time.Duration
}

// Timeout is the time allowed to upload size bytes.
func Timeout(size int64, base time.Duration, minRate int64) time.Duration {
	if minRate <= 0 {
		return base
	}
	return base + time.Duration(float64(size)/float64(minRate)*float64(time.Second))
}

// Check is what refusal a URL gets before anything is dialed.
func (u *Uploader) Check(raw string) error {
	_, err := u.Policy.CheckURL(raw)
	return err
}

func (u *Uploader) client(method string) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: u.control}
	tr := &http.Transport{
		Proxy:               nil, // never through an environment proxy: the policy must see the real peer
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: u.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return fmt.Errorf("%w: more than 3 redirects", ErrRefused)
			}
			if req.Method != method {
				// A 301/302/303 turns the PUT or POST into a GET: a
				// success answer to that GET would not mean the data
				// arrived.
				return fmt.Errorf("%w: redirect would change the %s into a %s", ErrRefused, method, req.Method)
			}
			if _, err := u.Policy.CheckURL(req.URL.String()); err != nil {
				return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
			}
			return nil
		},
	}
}

// control runs right before each connect, with the address being
// connected to (after DNS, for every address tried): the policy applies to
// what is really dialed, so a harmless-looking name cannot lead to a
// refused address.
func (u *Uploader) control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrRefused, host)
	}
	return u.Policy.CheckIP(ip)
}

// PutFile uploads the file at path to raw with PUT, retrying transient
// failures (network errors, 5xx, 429). It returns the bytes sent.
func (u *Uploader) PutFile(ctx context.Context, raw, path string) (int64, error) {
	return u.deliver(ctx, raw, path, http.MethodPut, func(ctx context.Context, target *url.URL, size int64) (*http.Request, error) {
		// The client closes the body when the request is done.
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, target.String(), f)
		if err != nil {
			f.Close()
			return nil, err
		}
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
		// A 307/308 redirect re-sends the body from the start.
		req.GetBody = func() (io.ReadCloser, error) { return os.Open(path) }
		return req, nil
	})
}

// deliver sends the file at path with requests made by build, one per
// attempt, retrying transient failures. It returns the file's size.
func (u *Uploader) deliver(ctx context.Context, raw, path, method string,
	build func(ctx context.Context, target *url.URL, size int64) (*http.Request, error)) (int64, error) {
	target, err := u.Policy.CheckURL(raw)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	size := st.Size()
	base, rate, attempts, backoff := u.BaseTimeout, u.MinRate, u.Attempts, u.Backoff
	if base <= 0 {
		base = 30 * time.Second
	}
	if rate <= 0 {
		rate = 1 << 20
	}
	if attempts <= 0 {
		attempts = 3
	}
	if backoff <= 0 {
		backoff = 2 * time.Second
	}
	client := u.client(method)
	defer client.CloseIdleConnections()
	timeout := Timeout(size, base, rate)
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, ctx.Err()
			case <-t.C:
			}
			backoff *= 2
		}
		retry, err := u.send(ctx, client, target, size, timeout, build)
		if err == nil {
			return size, nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return 0, last
}

func (u *Uploader) send(ctx context.Context, client *http.Client, target *url.URL, size int64, timeout time.Duration,
	build func(ctx context.Context, target *url.URL, size int64) (*http.Request, error)) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := build(ctx, target, size)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		err = sanitize(err)
		if errors.Is(err, ErrRefused) {
			return false, err
		}
		if ctx.Err() == context.DeadlineExceeded {
			return true, fmt.Errorf("upload of %d bytes timed out after %v (the timeout allows %s/s)", size, timeout, humanRate(size, timeout))
		}
		return true, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("upload to %s: server answered %s", target.Host, resp.Status)
	default:
		return false, fmt.Errorf("upload to %s: server answered %s", target.Host, resp.Status)
	}
}

// sanitize removes the query (a pre-signed URL's signature) from URLs in
// errors: they end up in status and logs.
func sanitize(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if p, perr := url.Parse(ue.URL); perr == nil {
			p.RawQuery, p.Fragment = "", ""
			ue.URL = p.Redacted()
		}
	}
	return err
}

func humanRate(size int64, d time.Duration) string {
	if d <= 0 {
		return "?"
	}
	r := float64(size) / d.Seconds()
	if r >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", r/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", r/(1<<10))
}
