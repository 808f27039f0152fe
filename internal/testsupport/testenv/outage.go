package testenv

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// OutageMode is how the proxy behaves while down.
type OutageMode int

const (
	// CloseAtAccept closes each connection as soon as it is accepted.
	CloseAtAccept OutageMode = iota
	// Refuse closes the listening socket: connections are refused, as
	// from a host whose API server process is gone.
	Refuse
	// CloseAfterRequest accepts each connection, reads what the client
	// sends first (its TLS hello: the request's first bytes) and closes
	// it, as a load balancer with no live servers behind it does.
	CloseAfterRequest
)

func (m OutageMode) String() string {
	switch m {
	case Refuse:
		return "connection refused"
	case CloseAfterRequest:
		return "accepted, closed after the request"
	}
	return "closed at accept"
}

// Outage sits between a client and the API server as a TCP proxy that can
// be cut: while it is down, open connections are closed and new ones are
// refused or closed (OutageMode), as an API server that is restarting or
// unreachable behind a load balancer looks to its clients. It also counts
// the requests that clients configured through Config send, and the
// connections it accepts.
type Outage struct {
	addr   string
	target string

	mu       sync.Mutex
	ln       net.Listener
	down     bool
	mode     OutageMode
	conns    map[net.Conn]struct{}
	accepted int

	sentMu sync.Mutex
	sent   []string // "METHOD /path?query" of every request
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
	o := &Outage{ln: ln, addr: ln.Addr().String(), target: u.Host, conns: map[net.Conn]struct{}{}}
	go o.serve(ln)
	return o, nil
}

// Config returns a copy of cfg that reaches the API server through the
// proxy (its TLS still checks the API server's certificate) and whose
// requests are counted.
func (o *Outage) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + o.addr
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return countingTripper{rt, o}
	})
	return c
}

// Requests returns "METHOD /path[?query]" of every request the clients
// have sent (tried to send), in order.
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

// Down cuts every connection and closes new ones at accept until Up.
func (o *Outage) Down() { o.DownAs(CloseAtAccept) }

// DownAs cuts every connection and treats new ones as mode says until Up.
func (o *Outage) DownAs(mode OutageMode) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down, o.mode = true, mode
	for c := range o.conns {
		_ = c.Close()
		delete(o.conns, c)
	}
	if mode == Refuse && o.ln != nil {
		_ = o.ln.Close()
		o.ln = nil
	}
}

// Up lets connections through again (listening again on the same address
// after Refuse; it panics if the address was taken meanwhile).
func (o *Outage) Up() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
	if o.ln == nil {
		ln, err := net.Listen("tcp", o.addr)
		if err != nil {
			panic("outage proxy: cannot listen again on " + o.addr + ": " + err.Error())
		}
		o.ln = ln
		go o.serve(ln)
	}
}

// Accepted is the number of connections the proxy has accepted.
func (o *Outage) Accepted() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.accepted
}

// Close stops the proxy.
func (o *Outage) Close() error {
	o.DownAs(Refuse)
	return nil
}

func (o *Outage) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go o.relay(c)
	}
}

// closeAfterRequestWait bounds how long a connection of CloseAfterRequest
// waits for the client's first bytes.
const closeAfterRequestWait = 10 * time.Second

func (o *Outage) relay(c net.Conn) {
	o.mu.Lock()
	o.accepted++
	if o.down {
		mode := o.mode
		o.mu.Unlock()
		if mode == CloseAfterRequest {
			_ = c.SetReadDeadline(time.Now().Add(closeAfterRequestWait))
			_, _ = c.Read(make([]byte, 4096))
		}
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
	req := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		req += "?" + r.URL.RawQuery
	}
	t.o.sent = append(t.o.sent, req)
	t.o.sentMu.Unlock()
	return t.rt.RoundTrip(r)
}
