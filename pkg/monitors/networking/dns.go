package networking

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

const resolvConfPath = "etc/resolv.conf"

// maxNameservers is glibc's MAXNS: later nameserver lines are ignored by
// the resolver, so they are not probed either.
const maxNameservers = 3

// dnsProbe is what one DNS check saw.
type dnsProbe struct {
	// Servers are the resolvers asked; none means there is nothing to ask.
	Servers []string
	// Answered is the first resolver that answered, with Rcode.
	Answered string
	Rcode    int
	// Errs are the failures, one per resolver that did not answer.
	Errs []string
	// Unroutable counts the resolvers the namespace has no route to: the
	// query never left. That is MissingDefaultRoutes' (or InterfaceNotUp's)
	// fault, reported once there, not a resolver that stopped answering.
	Unroutable int
}

func (m *Monitor) runDNS(ctx context.Context) ([]detection.Finding, error) {
	servers, err := m.dnsServers()
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		m.mu.Lock()
		m.dns.reset()
		m.mu.Unlock()
		return nil, nil
	}
	p, err := gather(ctx, m, &m.dnsGuard, "DNS probe", func() (dnsProbe, error) {
		return probeDNS(ctx, servers, m.opts.DNSQueryName, m.opts.ProbeTimeout), nil
	})
	if err != nil {
		return nil, err
	}
	thr := m.countThreshold(health.ReasonDNSResolverUnreachable)
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return evalDNS(&m.dns, p, m.opts.DNSQueryName, thr, now), nil
}

// dnsServers returns the configured resolver, else the nameservers of the
// host's resolv.conf. A host without resolv.conf has nothing to probe.
func (m *Monitor) dnsServers() ([]string, error) {
	if m.opts.DNSServer != "" {
		return []string{withPort(m.opts.DNSServer)}, nil
	}
	data, err := os.ReadFile(m.hostPath(resolvConfPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range parseResolvConf(data) {
		out = append(out, withPort(ns))
	}
	return out, nil
}

// withPort adds the DNS port to a host without one ("10.0.0.2",
// "fd00::53", "[fd00::53]:5353", "resolver:53").
func withPort(hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), "53")
}

// parseResolvConf returns the nameserver addresses of a resolv.conf, at
// most maxNameservers, as the resolver reads them: "nameserver ADDR" lines,
// '#' and ';' comments, addresses that do not parse skipped.
func parseResolvConf(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), 64<<10)
	for sc.Scan() && len(out) < maxNameservers {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		addr, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, addr.String())
	}
	return out
}

// probeDNS asks each server in turn until one answers, each within an
// equal share of timeout. The sockets are dialed in the calling goroutine
// (see netNS.run).
func probeDNS(ctx context.Context, servers []string, name string, timeout time.Duration) dnsProbe {
	p := dnsProbe{Servers: servers}
	each := timeout / time.Duration(len(servers)+1)
	for _, s := range servers {
		rcode, err := queryOnce(ctx, s, name, each)
		if err == nil {
			p.Answered, p.Rcode = s, rcode
			return p
		}
		if errors.Is(err, syscall.ENETUNREACH) {
			p.Unroutable++
		}
		p.Errs = append(p.Errs, fmt.Sprintf("%s: %v", s, err))
	}
	return p
}

func queryOnce(ctx context.Context, server, name string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id := uint16(rand.Uint32())
	q, err := buildQuery(id, name)
	if err != nil {
		return 0, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write(q); err != nil {
		return 0, err
	}
	buf := make([]byte, 512)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return 0, err
		}
		// A stray datagram (an answer to an earlier, timed-out query) is
		// not this answer: keep reading until the deadline.
		if rcode, err := parseResponseHeader(buf[:n], id); err == nil {
			return rcode, nil
		}
	}
}

// DNS wire format (RFC 1035 section 4.1).
const (
	dnsHeaderLen = 12
	flagQR       = 0x8000 // response
	flagRD       = 0x0100 // recursion desired
	typeA        = 1
	typeNS       = 2
	classIN      = 1
)

// buildQuery encodes a standard query with recursion desired for name: NS
// for the root, A for any other name.
func buildQuery(id uint16, name string) ([]byte, error) {
	qname, err := encodeName(name)
	if err != nil {
		return nil, err
	}
	qtype := uint16(typeA)
	if len(qname) == 1 {
		qtype = typeNS
	}
	b := make([]byte, dnsHeaderLen, dnsHeaderLen+len(qname)+4)
	binary.BigEndian.PutUint16(b[0:], id)
	binary.BigEndian.PutUint16(b[2:], flagRD)
	binary.BigEndian.PutUint16(b[4:], 1) // QDCOUNT
	b = append(b, qname...)
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, classIN)
	return b, nil
}

// encodeName encodes a domain name as length-prefixed labels ending with the
// root label. "." and "" are the root.
func encodeName(name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return []byte{0}, nil
	}
	var b []byte
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return nil, fmt.Errorf("invalid DNS name %q: empty label or label longer than 63 bytes", name)
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	b = append(b, 0)
	if len(b) > 255 {
		return nil, fmt.Errorf("invalid DNS name %q: longer than 255 bytes", name)
	}
	return b, nil
}

// parseResponseHeader checks that msg is a response to query id and returns
// its RCODE. Any RCODE (NXDOMAIN, REFUSED, SERVFAIL) proves the resolver is
// reachable, which is all this check asks.
func parseResponseHeader(msg []byte, id uint16) (int, error) {
	if len(msg) < dnsHeaderLen {
		return 0, fmt.Errorf("short DNS message: %d bytes", len(msg))
	}
	if got := binary.BigEndian.Uint16(msg[0:]); got != id {
		return 0, fmt.Errorf("DNS answer to query %d, want %d", got, id)
	}
	flags := binary.BigEndian.Uint16(msg[2:])
	if flags&flagQR == 0 {
		return 0, errors.New("DNS message is a query, not a response")
	}
	return int(flags & 0x000f), nil
}

// evalDNS reports DNSResolverUnreachable after threshold consecutive checks
// in which no resolver answered. When the namespace has no route to any of
// them (a fresh namespace, a node that lost its routes) the query never
// left: that is not counted, the routing reasons say it.
func evalDNS(s *strikes, p dnsProbe, name string, threshold int, now time.Time) []detection.Finding {
	if p.Answered != "" || len(p.Servers) == 0 || p.Unroutable == len(p.Servers) {
		s.reset()
		return nil
	}
	n := s.fail(now)
	if n < threshold {
		return nil
	}
	return []detection.Finding{{
		Reason: health.ReasonDNSResolverUnreachable,
		Message: fmt.Sprintf("no DNS resolver answered a query for %q in %d consecutive checks since %s: %s",
			name, n, s.since.UTC().Format(time.RFC3339), strings.Join(p.Errs, "; ")),
		Observed: now,
	}}
}
