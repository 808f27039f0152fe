package networking

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// netNS is the network namespace the monitor inspects. The zero value is the
// agent's own namespace (hostNetwork: true, or a systemd service).
type netNS struct {
	// path is the namespace file (nsfs), already under the host root.
	path string
}

// run calls fn on an OS thread switched into the namespace, so that every
// socket fn creates (netlink, ethtool, the DNS and health probes) and every
// /proc/sys/net file it opens belongs to that namespace. Sockets keep their
// namespace after the thread switches back; fn must create them itself, not
// hand the work to another goroutine (net/http's Transport dials in one).
func (n netNS) run(fn func() error) error {
	if n.path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(n.path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", n.path, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", n.path, err)
	}
	defer func() {
		// A thread that cannot switch back stays locked: the runtime then
		// discards it when this goroutine exits, instead of running other
		// goroutines in the wrong namespace.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}
