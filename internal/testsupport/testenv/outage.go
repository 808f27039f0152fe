package testenv

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"
)

// Outage sits between a client and the API server as a TCP proxy that can
// be cut: while it is down, open connections are closed and new ones are
// closed as soon as they are accepted, as an API server that is restarting
// or unreachable behind a load balancer looks to its clients. It also
// counts the requests that clients configured through Config send.
type Outage struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}

	sentMu sync.Mutex
	sent   []string // "METHOD /path" of every request
}

// NewOutage proxies to the API server of cfg until Close.
func NewOutage(cfg *rest.Config) (*Outage, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &Outage{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go o.serve()
	return o, nil
}

// Config returns a copy of cfg that reaches the API server through the
// proxy (its TLS still checks the API server's certificate) and whose
// requests are counted.
func (o *Outage) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + o.ln.Addr().String()
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return countingTripper{rt, o}
	})
	return c
}

// Requests returns "METHOD /path" of every request the clients have sent
// (tried to send), in order.
func (o *Outage) Requests() []string {
	o.sentMu.Lock()
	defer o.sentMu.Unlock()
	return append([]string(nil), o.sent...)
}

// Count counts the requests whose "METHOD /path" matches.
func (o *Outage) Count(match func(req string) bool) int {
	n := 0
	for _, r := range o.Requests() {
		if match(r) {
			n++
		}
	}
	return n
}

// Down cuts every connection and refuses new ones until Up.
func (o *Outage) Down() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = true
	for c := range o.conns {
		_ = c.Close()
		delete(o.conns, c)
	}
}

// Up lets connections through again.
func (o *Outage) Up() {
	o.mu.Lock()
	o.down = false
	o.mu.Unlock()
}

// Close stops the proxy.
func (o *Outage) Close() error {
	o.Down()
	return o.ln.Close()
}

func (o *Outage) serve() {
	for {
		c, err := o.ln.Accept()
		if err != nil {
			return
		}
		go o.relay(c)
	}
}

func (o *Outage) relay(c net.Conn) {
	o.mu.Lock()
	if o.down {
		o.mu.Unlock()
		_ = c.Close()
		return
	}
	o.conns[c] = struct{}{}
	o.mu.Unlock()
	up, err := net.Dial("tcp", o.target)
	if err != nil {
		_ = c.Close()
		return
	}
	o.mu.Lock()
	if o.down {
		o.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	o.conns[up] = struct{}{}
	o.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	o.mu.Lock()
	delete(o.conns, c)
	delete(o.conns, up)
	o.mu.Unlock()
}

type countingTripper struct {
	rt http.RoundTripper
	o  *Outage
}

func (t countingTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	t.o.sentMu.Lock()
	t.o.sent = append(t.o.sent, r.Method+" "+r.URL.Path)
	t.o.sentMu.Unlock()
	return t.rt.RoundTrip(r)
}
