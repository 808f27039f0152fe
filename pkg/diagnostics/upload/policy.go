package upload

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// ErrRefused marks a destination the policy does not allow.
var ErrRefused = errors.New("upload destination refused")

// Policy says which destinations are allowed.
type Policy struct {
	// Allow lists prefixes that are reachable although refused by default
	// (an in-cluster collector on a private address, a test server on
	// loopback). An IPv6 address that embeds an IPv4 address (see
	// embeddings) is allowed when its embedded address is.
	Allow []netip.Prefix
}

// rangeOf is one refused range and what it is, for the refusal message.
type rangeOf struct {
	prefix netip.Prefix
	what   string
}

// refusedRanges are never dialed unless allowed. Public addresses are
// what a pre-signed object-store URL resolves to. Each one is tested with
// an address just inside and just outside it (policy_test.go).
var refusedRanges = []rangeOf{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address (cloud metadata endpoint)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	// Before fc00::/7, which holds it: the message names it.
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata endpoint"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private) address"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

// embedding is an IPv6 form that carries an IPv4 address: a packet to such
// an address ends up at (or is routed by way of) the IPv4 address, so the
// address is judged by the IPv4 addresses it embeds.
type embedding struct {
	prefix netip.Prefix
	what   string
	// ipv4 returns every IPv4 address the form may carry: more than one
	// where the layout is not known (local-use NAT64) or the form names
	// two hosts (Teredo).
	ipv4 func(a [16]byte) []netip.Addr
}

func v4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]}) }

// last32 is the layout of the forms that end in the IPv4 address.
func last32(a [16]byte) []netip.Addr { return []netip.Addr{v4(a[12:16])} }

// embeddings are the IPv6 forms judged by their IPv4 address. IPv4-mapped
// addresses (::ffff:0:0/96) are IPv4 addresses to the dialer and are
// unmapped before anything else.
var embeddings = []embedding{
	// RFC 4291 §2.5.5.1 (deprecated, but still parsed and routed by some stacks).
	{netip.MustParsePrefix("::/96"), "IPv4-compatible address", last32},
	// RFC 2765 §2.1 (SIIT).
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated address", last32},
	// RFC 6052 §2.1: the well-known NAT64 prefix is only ever a /96.
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 address", last32},
	// RFC 8215: a site's own translator may use any RFC 6052 prefix length
	// inside this /48. Which one is not knowable from here, so every layout
	// that fits (/48, /56, /64, /96; RFC 6052 §2.2 skips bits 64-71) is
	// judged, and the address is refused if any of them names a refused
	// IPv4 address.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address", func(a [16]byte) []netip.Addr {
		return []netip.Addr{
			v4([]byte{a[6], a[7], a[9], a[10]}),  // /48
			v4([]byte{a[7], a[9], a[10], a[11]}), // /56
			v4(a[9:13]),                          // /64
			v4(a[12:16]),                         // /96
		}
	}},
	// RFC 3056 §2: 2002:V4ADDR::/48.
	{netip.MustParsePrefix("2002::/16"), "6to4 address", func(a [16]byte) []netip.Addr {
		return []netip.Addr{v4(a[2:6])}
	}},
	// RFC 4380 §4: the Teredo server's IPv4 address in bits 32-63, the
	// client's (where packets are relayed to) in the last 32 bits, each
	// bit inverted.
	{netip.MustParsePrefix("2001::/32"), "Teredo address", func(a [16]byte) []netip.Addr {
		return []netip.Addr{v4(a[4:8]), v4([]byte{^a[12], ^a[13], ^a[14], ^a[15]})}
	}},
}

// CheckIP reports why ip may not be dialed, or nil.
func (p Policy) CheckIP(ip netip.Addr) error {
	// A zoned address never matches a prefix: judge it without its zone.
	ip = ip.Unmap().WithZone("")
	if p.allowed(ip) {
		return nil
	}
	if what, refused := refusedRange(ip); refused {
		return fmt.Errorf("%w: %s is a %s (allow it in the agent's diagnostics configuration if it is meant)", ErrRefused, ip, what)
	}
	for _, e := range embeddings {
		if !e.prefix.Contains(ip) {
			continue
		}
		for _, inner := range e.ipv4(ip.As16()) {
			if p.allowed(inner) {
				continue
			}
			if what, refused := refusedRange(inner); refused {
				return fmt.Errorf("%w: %s is a %s that embeds %s, a %s (allow the IPv4 address in the agent's diagnostics configuration if it is meant)",
					ErrRefused, ip, e.what, inner, what)
			}
		}
	}
	return nil
}

func (p Policy) allowed(ip netip.Addr) bool {
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return true
		}
	}
	return false
}

func refusedRange(ip netip.Addr) (what string, refused bool) {
	for _, r := range refusedRanges {
		if r.prefix.Contains(ip) {
			return r.what, true
		}
	}
	return "", false
}

// CheckURL checks what can be checked before dialing: https, a host, no
// credentials in the URL, and a literal IP host against the policy.
func (p Policy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: not a URL", ErrRefused)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme %q, only https is allowed", ErrRefused, u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: credentials in the URL", ErrRefused)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: no host", ErrRefused)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return nil, fmt.Errorf("%w: %s is a loopback name", ErrRefused, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.CheckIP(ip); err != nil {
			return nil, err
		}
	}
	return u, nil
}
