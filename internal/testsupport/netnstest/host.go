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
	IP   net.IP
	ns   netns.NsHandle
	veth *netlink.Veth
}

var hostSeq atomic.Uint32

// NewHost creates a test host, removed when the test ends.
func NewHost(t testing.TB) *Host {
	t.Helper()
	h, err := OpenHost()
	if err != nil {
		t.Fatalf("creating a test host (needs root): %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// OpenHost creates a host for a program rather than a test (the local
// simulation's stand-in kubelets live on one); Close removes it.
func OpenHost() (_ *Host, err error) {
	ns, err := create()
	if err != nil {
		return nil, fmt.Errorf("cannot create a network namespace (needs root): %w", err)
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
		return nil, fmt.Errorf("creating veth for the host: %w", err)
	}
	h := &Host{IP: remote, ns: ns, veth: veth}
	defer func() {
		if err != nil {
			_ = h.Close()
		}
	}()
	peer, err := netlink.LinkByName(name + "b")
	if err != nil {
		return nil, err
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		return nil, err
	}
	mask := net.CIDRMask(30, 32)
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: local, Mask: mask}}); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return nil, err
	}
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	inside, err := nh.LinkByName(name + "b")
	if err != nil {
		return nil, err
	}
	if err := nh.AddrAdd(inside, &netlink.Addr{IPNet: &net.IPNet{IP: remote, Mask: mask}}); err != nil {
		return nil, err
	}
	for _, l := range []string{"lo", name + "b"} {
		link, err := nh.LinkByName(l)
		if err == nil {
			err = nh.LinkSetUp(link)
		}
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Close removes the host: its veth pair and namespace.
func (h *Host) Close() error {
	err := netlink.LinkDel(h.veth) // takes its peer along
	h.ns.Close()
	return err
}

// Listen opens a TCP listener on the host's address (port 0: any). The
// socket belongs to the host's namespace; serve it from any goroutine.
func (h *Host) Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := h.ListenPort(0)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// ListenPort opens a TCP listener on the host's address and port.
func (h *Host) ListenPort(port int) (net.Listener, error) {
	var ln net.Listener
	err := onOwnThread(func() error {
		if err := netns.Set(h.ns); err != nil {
			return err
		}
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(h.IP.String(), fmt.Sprint(port)))
		return err
	})
	return ln, err
}
