package upload

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// rangeCase is one refused range with addresses just inside it (its first
// and last) and just outside it (its neighbours, where they are not in
// another refused range). The table is written out by hand, not derived
// from refusedRanges, so that dropping or narrowing a range fails here.
type rangeCase struct {
	prefix  string
	what    string // in the refusal
	inside  []string
	outside []string
}

var v4Ranges = []rangeCase{
	{"0.0.0.0/8", `"this network"`, []string{"0.0.0.0", "0.255.255.255"}, []string{"1.0.0.0"}},
	{"10.0.0.0/8", "private address", []string{"10.0.0.0", "10.255.255.255"}, []string{"9.255.255.255", "11.0.0.0"}},
	{"100.64.0.0/10", "carrier-grade NAT", []string{"100.64.0.0", "100.127.255.255"}, []string{"100.63.255.255", "100.128.0.0"}},
	{"127.0.0.0/8", "loopback address", []string{"127.0.0.0", "127.255.255.255"}, []string{"126.255.255.255", "128.0.0.0"}},
	{"169.254.0.0/16", "link-local address", []string{"169.254.0.0", "169.254.169.254", "169.254.255.255"}, []string{"169.253.255.255", "169.255.0.0"}},
	{"172.16.0.0/12", "private address", []string{"172.16.0.0", "172.31.255.255"}, []string{"172.15.255.255", "172.32.0.0"}},
	{"192.0.0.0/24", "IETF protocol assignment", []string{"192.0.0.0", "192.0.0.255"}, []string{"191.255.255.255", "192.0.1.0"}},
	{"192.168.0.0/16", "private address", []string{"192.168.0.0", "192.168.255.255"}, []string{"192.167.255.255", "192.169.0.0"}},
	{"198.18.0.0/15", "benchmarking address", []string{"198.18.0.0", "198.19.255.255"}, []string{"198.17.255.255", "198.20.0.0"}},
	{"224.0.0.0/4", "multicast address", []string{"224.0.0.0", "239.255.255.255"}, []string{"223.255.255.255"}},
	{"240.0.0.0/4", "reserved address", []string{"240.0.0.0", "255.255.255.255"}, nil},
}

var v6Ranges = []rangeCase{
	{"::/128", "unspecified address", []string{"::"}, nil}, // :: + 1 is ::1, refused too
	{"::1/128", "loopback address", []string{"::1"}, nil},  // :: and ::2 are IPv4-compatible forms of refused 0.0.0.x
	{"fc00::/7", "unique local", []string{"fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"}},
	{"fe80::/10", "link-local address", []string{"fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::"}},
	{"ff00::/8", "multicast address", []string{"ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
	// Inside fc00::/7 as well; its own entry names it.
	{"fd00:ec2::254/128", "cloud metadata endpoint", []string{"fd00:ec2::254"}, nil},
}

func TestEveryRefusedRangeJustInsideAndJustOutside(t *testing.T) {
	p := Policy{}
	for _, rc := range append(append([]rangeCase{}, v4Ranges...), v6Ranges...) {
		prefix := netip.MustParsePrefix(rc.prefix)
		for _, s := range rc.inside {
			ip := netip.MustParseAddr(s)
			if !prefix.Contains(ip) {
				t.Fatalf("table: %s is not in %s", s, rc.prefix)
			}
			err := p.CheckIP(ip)
			if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), rc.what) {
				t.Errorf("%s (in %s): %v, want a refusal naming a %s", s, rc.prefix, err, rc.what)
			}
		}
		for _, s := range rc.outside {
			ip := netip.MustParseAddr(s)
			if prefix.Contains(ip) {
				t.Fatalf("table: %s is in %s", s, rc.prefix)
			}
			if err := p.CheckIP(ip); err != nil {
				t.Errorf("%s (just outside %s): refused: %v", s, rc.prefix, err)
			}
		}
	}
}

// embed writes v4 into an address of the given form.
type embedCase struct {
	prefix string
	what   string
	embed  func(v4 netip.Addr) netip.Addr
	// outside are addresses just outside the form's prefix that carry a
	// refused IPv4 address where the form would: they are ordinary IPv6
	// addresses, judged as such.
	outside []string
}

func from16(b [16]byte) netip.Addr { return netip.AddrFrom16(b) }

func withLast32(prefix string) func(netip.Addr) netip.Addr {
	return func(v4 netip.Addr) netip.Addr {
		b := netip.MustParseAddr(prefix).As16()
		a := v4.As4()
		copy(b[12:], a[:])
		return from16(b)
	}
}

var embeddingCases = []embedCase{
	{"::/96", "IPv4-compatible", withLast32("::"), []string{"0:0:0:0:0:1:a00:1"}},
	{"::ffff:0:0:0/96", "IPv4-translated", withLast32("::ffff:0:0:0"), []string{"::fffe:0:a00:1", "::1:ffff:0:a00:1"}},
	{"64:ff9b::/96", "NAT64", withLast32("64:ff9b::"), []string{"64:ff9a:ffff:ffff:ffff:ffff:a00:1", "64:ff9b::1:0:a00:1"}},
	// The /96 layout, with the bytes of the other layouts (/48, /56, /64)
	// set to read as public 8.8.8.x.
	{"64:ff9b:1::/48", "local-use NAT64", withLast32("64:ff9b:1:808:8:808::"), []string{"64:ff9b:0:808:8:808:a00:1", "64:ff9b:2:808:8:808:a00:1"}},
	{"2002::/16", "6to4", func(v4 netip.Addr) netip.Addr {
		b := netip.MustParseAddr("2002::1").As16()
		a := v4.As4()
		copy(b[2:6], a[:])
		return from16(b)
	}, []string{"2001:ffff:a00:1::1", "2003:a00:1::1"}},
	// The client address (last 32 bits, inverted), with a public server
	// (65.54.227.120, bits 32-63).
	{"2001::/32", "Teredo", func(v4 netip.Addr) netip.Addr {
		b := netip.MustParseAddr("2001:0:4136:e378:8000::").As16()
		a := v4.As4()
		for i := range a {
			b[12+i] = ^a[i]
		}
		return from16(b)
	}, []string{"2000:ffff:ffff:ffff:8000:63bf:f5ff:fffe", "2001:1:4136:e378:8000:63bf:f5ff:fffe"}},
}

// Every IPv6 form that embeds an IPv4 address is judged by that address:
// for each form and each refused IPv4 range, the form carrying an address
// just inside the range is refused and one carrying an address just
// outside it is allowed; an address just outside the form's own prefix is
// an ordinary IPv6 address.
func TestIPv6FormsAreJudgedByTheirEmbeddedIPv4(t *testing.T) {
	p := Policy{}
	for _, ec := range embeddingCases {
		prefix := netip.MustParsePrefix(ec.prefix)
		for _, rc := range v4Ranges {
			for _, s := range rc.inside {
				ip := ec.embed(netip.MustParseAddr(s))
				if !prefix.Contains(ip) {
					t.Fatalf("table: %s is not in %s", ip, ec.prefix)
				}
				err := p.CheckIP(ip)
				if _, plain := refusedRange(ip); plain {
					// :: is the IPv4-compatible form of 0.0.0.0 and refused as itself.
					if !errors.Is(err, ErrRefused) {
						t.Errorf("%s: %v, want refused", ip, err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), ec.what) || !strings.Contains(err.Error(), "embeds "+s) || !strings.Contains(err.Error(), rc.what) {
					t.Errorf("%s (%s of %s): %v, want a refusal naming the form, the IPv4 address and a %s", ip, ec.what, s, err, rc.what)
				}
			}
			for _, s := range rc.outside {
				ip := ec.embed(netip.MustParseAddr(s))
				if err := p.CheckIP(ip); err != nil {
					t.Errorf("%s (%s of %s): refused: %v", ip, ec.what, s, err)
				}
			}
		}
		for _, s := range ec.outside {
			ip := netip.MustParseAddr(s)
			if prefix.Contains(ip) {
				t.Fatalf("table: %s is in %s", s, ec.prefix)
			}
			if err := p.CheckIP(ip); err != nil {
				t.Errorf("%s (just outside %s): refused: %v", s, ec.prefix, err)
			}
		}
	}
}

// Specific addresses, as they would be written in a URL.
func TestEmbeddedIPv4Examples(t *testing.T) {
	allow10 := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	for _, tc := range []struct {
		policy Policy
		addr   string
		want   string // empty: allowed
	}{
		{Policy{}, "::ffff:169.254.169.254", "169.254.169.254 is a link-local address"},
		{Policy{}, "::ffff:8.8.8.8", ""},
		{Policy{}, "::169.254.169.254", "IPv4-compatible address that embeds 169.254.169.254"},
		{Policy{}, "::8.8.8.8", ""},
		{Policy{}, "64:ff9b::169.254.169.254", "NAT64 address that embeds 169.254.169.254"},
		{Policy{}, "64:ff9b::a9fe:a9fe", "embeds 169.254.169.254"},
		{Policy{}, "64:ff9b::7f00:1", "embeds 127.0.0.1, a loopback address"},
		{Policy{}, "64:ff9b::808:808", ""},
		{Policy{}, "2002:a9fe:a9fe::1", "6to4 address that embeds 169.254.169.254"},
		{Policy{}, "2002:c0a8:101::", "embeds 192.168.1.1"},
		{Policy{}, "2002:808:808::1", ""},
		// Teredo client 10.0.0.1 (inverted f5ff:fffe) behind public server 65.54.227.120.
		{Policy{}, "2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo address that embeds 10.0.0.1"},
		// Teredo with a private "server".
		{Policy{}, "2001:0:a00:1:8000:63bf:3fd7:f7f7", "Teredo address that embeds 10.0.0.1"},
		// RFC 4380's example: server 65.54.227.120, client 192.0.2.45 (public documentation range).
		{Policy{}, "2001:0:4136:e378:8000:63bf:3fff:fdd2", ""},
		// Local-use NAT64 in each layout, carrying 10.0.0.1.
		{Policy{}, "64:ff9b:1::a00:1", "local-use NAT64"},                  // /96
		{Policy{}, "64:ff9b:1:808:a:0:108:808", "embeds 10.0.0.1"},         // /64: bytes 9-12
		{Policy{}, "64:ff9b:1:80a:0:1:808:808", "embeds 10.0.0.1"},         // /56: bytes 7, 9-11
		{Policy{}, "64:ff9b:1:a00:0:100:808:808", "embeds 10.0.0.1"},       // /48: bytes 6-7, 9-10
		{Policy{}, "64:ff9b:1:808:8:808:808:808", ""},                      // 8.8.8.8 in every layout
		{allow10, "64:ff9b::a14:1e28", ""},                                 // 10.20.30.40, allowed
		{allow10, "64:ff9b::a1e:1", "embeds 10.30.0.1, a private address"}, // not allowed
		{Policy{Allow: []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96")}}, "64:ff9b::a00:1", ""},
		{Policy{}, "fe80::1%eth0", "link-local address"},
	} {
		err := tc.policy.CheckIP(netip.MustParseAddr(tc.addr))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.addr, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal with %q", tc.addr, err, tc.want)
		}
	}
}

// The tables above cover every range and form of the policy: a range
// added without a test, or a test left for a removed range, fails here.
func TestTablesCoverThePolicy(t *testing.T) {
	tested := map[string]bool{}
	for _, rc := range append(append([]rangeCase{}, v4Ranges...), v6Ranges...) {
		tested[rc.prefix] = true
	}
	for _, ec := range embeddingCases {
		tested[ec.prefix] = true
	}
	inPolicy := map[string]bool{}
	for _, r := range refusedRanges {
		inPolicy[r.prefix.String()] = true
	}
	for _, e := range embeddings {
		inPolicy[e.prefix.String()] = true
	}
	for p := range inPolicy {
		if !tested[p] {
			t.Errorf("%s is in the policy but not in the tables", p)
		}
	}
	for p := range tested {
		if !inPolicy[p] {
			t.Errorf("%s is in the tables but not in the policy", p)
		}
	}
}
