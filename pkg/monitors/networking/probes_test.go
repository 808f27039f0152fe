package networking

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
)

// kubeProxy is a fake kube-proxy health server: /livez and /healthz answer
// like kube-proxy's (pkg/proxy/healthcheck/proxy_health.go) JSON bodies.
type kubeProxy struct {
	status  atomic.Int32
	noLivez bool
}

func (k *kubeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/livez" && k.noLivez {
		http.NotFound(w, r)
		return
	}
	code := int(k.status.Load())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"lastUpdated": "2026-03-14 09:20:00.000000000 +0000 UTC m=+3600.0", "currentTime": "2026-03-14 09:26:53.000000000 +0000 UTC m=+3653.0", "nodeEligible": true}`)
}

func TestKubeProxyCheck(t *testing.T) {
	for _, noLivez := range []bool{false, true} {
		t.Run(fmt.Sprintf("noLivez=%v", noLivez), func(t *testing.T) {
			kp := &kubeProxy{noLivez: noLivez}
			kp.status.Store(200)
			srv := httptest.NewServer(kp)
			addr := strings.TrimPrefix(srv.URL, "http://")
			clk := clocktesting.NewFakePassiveClock(t0)
			m := New(testEnv(hostroot.New(t), clk, nil), Options{KubeProxyHealthz: addr, ProbeTimeout: 2 * time.Second})
			check := monitortest.Stepper(t, m, "net-kube-proxy", clk, 30*time.Second)
			check("")
			kp.status.Store(503)
			check("")
			check("")
			check("KubeProxyNotReady")
			fs, _ := runCheck(t, m, "net-kube-proxy")
			wantPath := "/livez"
			if noLivez {
				wantPath = "/healthz"
			}
			if !strings.Contains(fs[0].Message, addr+wantPath+" has failed 4 consecutive health checks") || !strings.Contains(fs[0].Message, "HTTP 503") {
				t.Fatalf("message %q", fs[0].Message)
			}
			kp.status.Store(200)
			check("")
			// Seen before: a kube-proxy that stops listening is a fault.
			srv.Close()
			check("")
			check("")
			check("KubeProxyNotReady")
		})
	}
}

func TestNoKubeProxyIsNotAFault(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	m := New(testEnv(hostroot.New(t), clocktesting.NewFakePassiveClock(t0), nil), Options{KubeProxyHealthz: addr})
	for range 5 {
		if fs, err := runCheck(t, m, "net-kube-proxy"); err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
}

// fakeResolver answers DNS queries on a real UDP socket with the given
// RCODE, or stays silent.
type fakeResolver struct {
	conn   net.PacketConn
	silent atomic.Bool
	rcode  byte
	got    atomic.Int32
}

func newFakeResolver(t *testing.T, rcode byte) *fakeResolver {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeResolver{conn: c, rcode: rcode}
	go serveDNS(r)
	t.Cleanup(func() { c.Close() })
	return r
}

// serveDNS answers every query on r.conn by echoing it as a response with
// r.rcode, until the socket is closed.
func serveDNS(r *fakeResolver) {
	buf := make([]byte, 512)
	for {
		n, from, err := r.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		r.got.Add(1)
		if r.silent.Load() || n < dnsHeaderLen {
			continue
		}
		resp := bytes.Clone(buf[:n])
		flags := binary.BigEndian.Uint16(resp[2:]) | flagQR | 0x0080 | uint16(r.rcode)
		binary.BigEndian.PutUint16(resp[2:], flags)
		_, _ = r.conn.WriteTo(resp, from)
	}
}

func (r *fakeResolver) addr() string { return r.conn.LocalAddr().String() }

func TestDNSCheck(t *testing.T) {
	good := newFakeResolver(t, 0)
	refusing := newFakeResolver(t, 5) // REFUSED still proves reachability
	dead := newFakeResolver(t, 0)
	dead.silent.Store(true)
	for _, tc := range []struct {
		name   string
		server *fakeResolver
		want   string
	}{
		{"the resolver answers", good, ""},
		{"REFUSED is an answer", refusing, ""},
		{"nobody answers", dead, "DNSResolverUnreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			m := New(testEnv(hostroot.New(t), clk, nil), Options{DNSServer: tc.server.addr(), ProbeTimeout: 600 * time.Millisecond})
			var got []string
			for range 3 {
				fs, err := runCheck(t, m, "net-dns")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, reasons(fs))
				clk.SetTime(clk.Now().Add(30 * time.Second))
			}
			// The threshold is 3 consecutive checks: only the third may fire.
			if got[0] != "" || got[1] != "" || got[2] != tc.want {
				t.Fatalf("got %q, want %q on the third check", got, tc.want)
			}
		})
	}
}

// TestDNSResolvConfInNetNS reads the host's resolv.conf and probes its
// nameserver from inside the inspected namespace: 127.0.0.1:53 there is
// nobody until the test starts a resolver in that namespace.
func TestDNSResolvConfInNetNS(t *testing.T) {
	ns := netnstest.New(t)
	ns.Up("lo")
	root := hostroot.New(t)
	root.Symlink("run/netns/node", ns.Path)
	root.WriteFile("etc/resolv.conf", "nameserver 127.0.0.1\noptions edns0\n")
	clk := clocktesting.NewFakePassiveClock(t0)
	m := New(testEnv(root, clk, nil), Options{NetNS: "/run/netns/node", ProbeTimeout: time.Second})
	check := monitortest.Stepper(t, m, "net-dns", clk, 30*time.Second)
	check("")
	check("")
	check("DNSResolverUnreachable")
	var conn net.PacketConn
	if err := (netNS{path: ns.Path}).run(func() error {
		var err error
		conn, err = net.ListenPacket("udp", "127.0.0.1:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := &fakeResolver{conn: conn}
	go serveDNS(r)
	t.Cleanup(func() { conn.Close() })
	check("")
}

func TestEvalDNSUnroutable(t *testing.T) {
	var s strikes
	p := dnsProbe{Servers: []string{"10.0.0.2:53"}, Unroutable: 1, Errs: []string{"network is unreachable"}}
	for range 5 {
		if fs := evalDNS(&s, p, ".", 3, t0); len(fs) != 0 {
			t.Fatalf("%v", fs)
		}
	}
	// One of two resolvers routable but silent: that one is unreachable.
	p = dnsProbe{Servers: []string{"10.0.0.2:53", "fd00::53"}, Unroutable: 1, Errs: []string{"a", "b"}}
	var fs []string
	for range 3 {
		fs = append(fs, reasons(evalDNS(&s, p, ".", 3, t0)))
	}
	if fs[2] != "DNSResolverUnreachable" {
		t.Fatalf("%v", fs)
	}
}

func TestProbeDNSRealResolverOrder(t *testing.T) {
	dead := newFakeResolver(t, 0)
	dead.silent.Store(true)
	good := newFakeResolver(t, 3) // NXDOMAIN
	p := probeDNS(context.Background(), []string{dead.addr(), good.addr()}, "kubernetes.default.svc.cluster.local", time.Second)
	if p.Answered != good.addr() || p.Rcode != 3 || len(p.Errs) != 1 || dead.got.Load() != 1 {
		t.Fatalf("%+v (dead got %d)", p, dead.got.Load())
	}
}

func TestNoResolvConfIsNotAFault(t *testing.T) {
	m := New(testEnv(hostroot.New(t), clocktesting.NewFakePassiveClock(t0), nil), Options{})
	for range 4 {
		if fs, err := runCheck(t, m, "net-dns"); err != nil || len(fs) != 0 {
			t.Fatalf("%v, %v", fs, err)
		}
	}
}

func TestParseResolvConf(t *testing.T) {
	conf := `# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).
nameserver 127.0.0.53
options edns0 trust-ad
search eu-west-1.compute.internal
nameserver fd00:ec2::253 # IPv6 Amazon DNS
;nameserver 10.0.0.99
nameserver not-an-address
nameserver	169.254.169.253
nameserver 10.0.0.2
`
	got := parseResolvConf([]byte(conf))
	if want := "127.0.0.53,fd00:ec2::253,169.254.169.253"; strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s (at most three, like glibc)", got, want)
	}
	for in, want := range map[string]string{
		"10.0.0.2": "10.0.0.2:53", "fd00::53": "[fd00::53]:53", "[fd00::53]:5353": "[fd00::53]:5353", "resolver:5353": "resolver:5353", "[fd00::1]": "[fd00::1]:53",
	} {
		if got := withPort(in); got != want {
			t.Errorf("withPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildQueryWireFormat(t *testing.T) {
	q, err := buildQuery(0xbeef, "example.com.")
	if err != nil {
		t.Fatal(err)
	}
	// RFC 1035 4.1: ID, flags RD, QDCOUNT 1, no other records; QNAME
	// 7"example"3"com"0, QTYPE A, QCLASS IN.
	want := []byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1}
	if !bytes.Equal(q, want) {
		t.Fatalf("got % x\nwant % x", q, want)
	}
	root, _ := buildQuery(1, ".")
	if !bytes.Equal(root[12:], []byte{0, 0, 2, 0, 1}) {
		t.Fatalf("root query % x: want QTYPE NS", root[12:])
	}
	for _, bad := range []string{"a..b", strings.Repeat("x", 64) + ".com", strings.Repeat("abcdefghi.", 26) + "com"} {
		if _, err := buildQuery(1, bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestParseResponseHeader(t *testing.T) {
	resp := []byte{0xbe, 0xef, 0x81, 0x83, 0, 1, 0, 0, 0, 1, 0, 0}
	if rcode, err := parseResponseHeader(resp, 0xbeef); err != nil || rcode != 3 {
		t.Fatalf("%v, %v", rcode, err)
	}
	if _, err := parseResponseHeader(resp, 0xbeee); err == nil {
		t.Fatal("wrong ID accepted")
	}
	query := []byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	if _, err := parseResponseHeader(query, 0xbeef); err == nil {
		t.Fatal("a query accepted as a response")
	}
	if _, err := parseResponseHeader(resp[:11], 0xbeef); err == nil {
		t.Fatal("short message accepted")
	}
}

func TestHTTPGetNoListener(t *testing.T) {
	_, err := httpGet(context.Background(), "unix", "/nonexistent/x.sock", "/", time.Second)
	if !errors.Is(err, errNoListener) {
		t.Fatalf("got %v", err)
	}
}
