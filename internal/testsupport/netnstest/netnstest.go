// Package netnstest gives tests a real network namespace of their own: a
// fresh namespace (loopback only, down) that the test changes through
// netlink and that the kernel destroys when the test ends. The test process
// never moves into it; the code under test reaches it through Path.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NS is a network namespace owned by a test.
type NS struct {
	// Path opens the namespace: /proc/<pid>/fd/<fd> of the handle the test
	// holds, valid until the test ends.
	Path string
	// H is a netlink handle inside the namespace.
	H *netlink.Handle
	t testing.TB
}

// New creates a namespace; the test fails where that is not allowed
// (without CAP_SYS_ADMIN).
func New(t testing.TB) *NS {
	t.Helper()
	ns, err := create()
	if err != nil {
		t.Fatalf("cannot create a network namespace: %v (these tests run as root, as make test and CI do)", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		ns.Close() // the last reference: the kernel destroys the namespace
	})
	return &NS{Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns)), H: h, t: t}
}

// create makes a namespace without moving the test into it.
func create() (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := onOwnThread(func() error {
		var err error
		ns, err = netns.New() // switches this thread into it
		return err
	})
	return ns, err
}

// onOwnThread runs f on a locked thread of its own goroutine and switches
// that thread back to the test's namespace afterwards, so f may enter other
// namespaces. A thread that cannot switch back stays locked and dies with
// its goroutine, never running other code in the wrong namespace.
func onOwnThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		err = f()
		if setErr := netns.Set(orig); setErr != nil {
			done <- errors.Join(err, setErr)
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// Link returns the link called name.
func (n *NS) Link(name string) netlink.Link {
	n.t.Helper()
	l, err := n.H.LinkByName(name)
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

// Up sets links administratively up.
func (n *NS) Up(names ...string) {
	n.t.Helper()
	for _, name := range names {
		if err := n.H.LinkSetUp(n.Link(name)); err != nil {
			n.t.Fatal(err)
		}
	}
}

// Down sets links administratively down.
func (n *NS) Down(names ...string) {
	n.t.Helper()
	for _, name := range names {
		if err := n.H.LinkSetDown(n.Link(name)); err != nil {
			n.t.Fatal(err)
		}
	}
}

// AddVeth creates a veth pair: a link whose carrier follows its peer, so
// "up but not running" is real (bring the peer down).
func (n *NS) AddVeth(name, peer string) {
	n.t.Helper()
	if err := n.H.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		n.t.Fatalf("creating veth %s/%s: %v", name, peer, err)
	}
}

// AddAddr adds an address ("192.0.2.10/24") to a link.
func (n *NS) AddAddr(name, cidr string) {
	n.t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.H.AddrAdd(n.Link(name), a); err != nil {
		n.t.Fatal(err)
	}
}

// AddDefaultRoute adds a default route via gw on dev.
func (n *NS) AddDefaultRoute(dev, gw string) {
	n.t.Helper()
	if err := n.H.RouteAdd(&netlink.Route{LinkIndex: n.Link(dev).Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
		n.t.Fatal(err)
	}
}

// WaitRunning waits until the kernel's link watcher has set (or cleared)
// IFF_RUNNING on name: carrier changes reach the flags asynchronously, up to
// a second later.
func (n *NS) WaitRunning(name string, running bool) {
	n.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if (n.Link(name).Attrs().RawFlags&unix.IFF_RUNNING != 0) == running {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: IFF_RUNNING did not become %v", name, running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Exec runs a command inside the namespace (a thread switched into it
// forks the command, which inherits the namespace) and fails the test if it
// fails. For tools the test needs there, such as iptables.
func (n *NS) Exec(name string, args ...string) string {
	n.t.Helper()
	var out []byte
	err := onOwnThread(func() error {
		target, err := netns.GetFromPath(n.Path)
		if err != nil {
			return err
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			return err
		}
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		n.t.Fatalf("%s %v in the test namespace: %v: %s", name, args, err, out)
	}
	return string(out)
}
