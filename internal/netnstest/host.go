package netnstest

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Host is a test host: a namespace of its own joined to the test's namespace
// by a veth pair, so that servers the test runs there have an address that
// is neither loopback nor anybody else's. The API server refuses to proxy to
// loopback node addresses and NodeDiagnostic admission refuses loopback upload
// URLs; a Host gives such tests a real, local peer.
type Host struct {
	// IP is the host's address; the test's namespace routes to it.
	IP net.IP
	ns netns.NsHandle
}

var hostSeq atomic.Uint32

// NewHost creates a test host, removed when the test ends.
func NewHost(t testing.TB) *Host {
	t.Helper()
	ns, err := create()
	if err != nil {
		t.Fatalf("cannot create a network namespace (needs root): %v", err)
	}
	n := hostSeq.Add(1)
	pid := os.Getpid()
	// Distinct per process and per host, so packages testing in parallel
	// never collide: 10.254.<pid mod 256>.<4·n mod 256>/30.
	base := net.IPv4(10, 254, byte(pid), byte(4*n))
	local, remote := net.IPv4(base[12], base[13], base[14], base[15]+1), net.IPv4(base[12], base[13], base[14], base[15]+2)
	name := fmt.Sprintf("nmt%d-%d", pid%100000, n%100)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name + "a"}, PeerName: name + "b"}
	if err := netlink.LinkAdd(veth); err != nil {
		ns.Close()
		t.Fatalf("creating veth for the test host: %v", err)
	}
	t.Cleanup(func() {
		_ = netlink.LinkDel(veth) // takes its peer along
		ns.Close()
	})
	peer, err := netlink.LinkByName(name + "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		t.Fatal(err)
	}
	mask := net.CIDRMask(30, 32)
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: local, Mask: mask}}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	inside, err := h.LinkByName(name + "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(inside, &netlink.Addr{IPNet: &net.IPNet{IP: remote, Mask: mask}}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"lo", name + "b"} {
		link, err := h.LinkByName(l)
		if err == nil {
			err = h.LinkSetUp(link)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &Host{IP: remote, ns: ns}
}

// Listen opens a TCP listener on the host's address (port 0: any). The
// socket belongs to the host's namespace; serve it from any goroutine.
func (h *Host) Listen(t testing.TB) net.Listener {
	t.Helper()
	var ln net.Listener
	err := onOwnThread(func() error {
		if err := netns.Set(h.ns); err != nil {
			return err
		}
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(h.IP.String(), "0"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
