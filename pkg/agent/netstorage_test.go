package agent

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/pkg/health"
)

// TestNetworkingFatalFlipsAndRecovers runs the agent against a real API
// server and a real network namespace: a veth pair brought down and up
// with netlink flips NetworkingReady to False (InterfaceNotUp or
// InterfaceNotRunning, whichever the check saw first) and back to True.
func TestNetworkingFatalFlipsAndRecovers(t *testing.T) {
	ns := netnstest.New(t)
	ns.Up("lo")
	ns.AddVeth("ens5", "ens6")
	ns.AddAddr("ens5", "192.0.2.10/24")
	// An address says the interface is meant to be up, whether or not the
	// agent's first check saw it up.
	ns.AddAddr("ens6", "198.51.100.10/24")
	ns.Up("ens5", "ens6")
	ns.WaitRunning("ens5", true)
	ns.AddDefaultRoute("ens5", "192.0.2.1")

	root := hostroot.New(t).WithProc()
	root.Symlink("run/netns/node", ns.Path)
	r := startAgent(t, root, fileJournal+`monitors:
  networking:
    checkInterval: 1s
    probeTimeout: 1s
    netns: /run/netns/node
  storage:
    enabled: false
`)
	r.waitNode("NetworkingReady True", is(health.NetworkingReady, corev1.ConditionTrue, health.HealthyNetworkingIsReady))
	if n := r.waitNode("", func(*corev1.Node) bool { return true }); condition(n, health.StorageReady) != nil {
		t.Fatal("a disabled monitor wrote its condition")
	}

	ns.Down("ens6") // ens6 is down; ens5 loses its carrier
	n := r.waitNode("NetworkingReady False", func(n *corev1.Node) bool {
		c := condition(n, health.NetworkingReady)
		return c != nil && c.Status == corev1.ConditionFalse &&
			(c.Reason == health.ReasonInterfaceNotUp || c.Reason == health.ReasonInterfaceNotRunning)
	})
	if msg := condition(n, health.NetworkingReady).Message; !strings.Contains(msg, "ens6") && !strings.Contains(msg, "ens5") {
		t.Fatalf("message names no interface: %q", msg)
	}
	r.waitEvent(health.ReasonInterfaceNotUp)

	ns.Up("ens6")
	r.waitNode("NetworkingReady True again", is(health.NetworkingReady, corev1.ConditionTrue, health.HealthyNetworkingIsReady))
}

// TestStorageFatalFlipsAndRecovers drives two StorageReady faults through
// the agent: the host's mount table showing a filesystem the kernel
// remounted read-only (FilesystemReadOnly), and a really read-only
// filesystem under the probe directory, where the kernel refuses the
// write probe with EROFS (FilesystemNotWritable). Each recovers to True.
func TestStorageFatalFlipsAndRecovers(t *testing.T) {
	root := hostroot.New(t).WithProc().WithMounts()
	r := startAgent(t, root, fileJournal+`monitors:
  storage:
    checkInterval: 1s
    probeTimeout: 1s
`)
	r.waitNode("StorageReady True", is(health.StorageReady, corev1.ConditionTrue, health.HealthyDiskIsReady))

	remounted := append([]hostroot.Mount(nil), hostroot.DefaultMounts...)
	for i := range remounted {
		if remounted[i].Point == "/var/lib/containerd" {
			remounted[i].SuperOptions = "ro,relatime"
		}
	}
	root.WithMounts(remounted...)
	n := r.waitNode("StorageReady False (read-only)", is(health.StorageReady, corev1.ConditionFalse, health.ReasonFilesystemReadOnly))
	if msg := condition(n, health.StorageReady).Message; !strings.Contains(msg, "/var/lib/containerd") {
		t.Fatalf("message %q", msg)
	}
	root.WithMounts()
	r.waitNode("StorageReady True after remount", is(health.StorageReady, corev1.ConditionTrue, health.HealthyDiskIsReady))

	dir := root.Path("var/lib/nodemend")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=64k"); err != nil {
		t.Fatalf("cannot mount a tmpfs: %v (these tests run as root, as make test and CI do)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	n = r.waitNode("StorageReady False (not writable)", is(health.StorageReady, corev1.ConditionFalse, health.ReasonFilesystemNotWritable))
	if msg := condition(n, health.StorageReady).Message; !strings.Contains(msg, "read-only file system") {
		t.Fatalf("message %q", msg)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=64k"); err != nil {
		t.Fatal(err)
	}
	r.waitNode("StorageReady True after the probe works", is(health.StorageReady, corev1.ConditionTrue, health.HealthyDiskIsReady))
}
