package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// --- network -----------------------------------------------------------

// setUpNetwork creates the node's link (a veth pair with the node's
// address on one end) and the pod bridge with the gateway address.
func (l Layout) setUpNetwork() error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.NodeLink}, PeerName: l.NodeLink + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating the node's link %s: %w", l.NodeLink, err)
	}
	if err := addrUp(l.NodeLink, net.IPNet{IP: net.IP(l.NodeIP.AsSlice()), Mask: net.CIDRMask(32, 32)}); err != nil {
		return err
	}
	if err := linkUp(l.NodeLink + "p"); err != nil {
		return err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: l.Bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("creating the pod bridge %s: %w", l.Bridge, err)
	}
	return addrUp(l.Bridge, net.IPNet{IP: net.IP(l.Gateway.AsSlice()), Mask: net.CIDRMask(l.PodCIDR.Bits(), 32)})
}

func addrUp(name string, ipnet net.IPNet) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &ipnet}); err != nil {
		return fmt.Errorf("adding %s to %s: %w", ipnet.String(), name, err)
	}
	return netlink.LinkSetUp(link)
}

func linkUp(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(link)
}

// tearDownNetwork deletes the node's links and every link still enslaved
// to the pod bridge (pod veths whose sandbox could not be removed).
func (l Layout) tearDownNetwork() error {
	var errs []error
	if br, err := netlink.LinkByName(l.Bridge); err == nil {
		links, _ := netlink.LinkList()
		for _, link := range links {
			if link.Attrs().MasterIndex == br.Attrs().Index {
				if err := netlink.LinkDel(link); err != nil {
					errs = append(errs, fmt.Errorf("deleting %s: %w", link.Attrs().Name, err))
				}
			}
		}
	}
	for _, name := range []string{l.Bridge, l.NodeLink} {
		link, err := netlink.LinkByName(name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			continue
		}
		if err == nil {
			err = netlink.LinkDel(link)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// --- iptables ----------------------------------------------------------

// ownChain reports whether a chain is one the node's components create:
// kube-proxy's and the kubelet's KUBE-*, the CNI plugins' CNI-*.
func ownChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-")
}

// residueRules parses iptables-save output and returns, per table, the
// rules of other chains that jump to an own chain (as iptables -D
// arguments) and the own chains themselves.
func residueRules(save string) (jumps map[string][][]string, chains map[string][]string) {
	jumps, chains = map[string][][]string{}, map[string][]string{}
	table := ""
	sc := bufio.NewScanner(strings.NewReader(save))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			if ownChain(name) {
				chains[table] = append(chains[table], name)
			}
		case strings.HasPrefix(line, "-A "):
			f := splitRule(line)
			if len(f) < 2 || ownChain(f[1]) {
				continue // flushed with its chain
			}
			for i, a := range f {
				if (a == "-j" || a == "-g") && i+1 < len(f) && ownChain(f[i+1]) {
					jumps[table] = append(jumps[table], append([]string{"-D"}, f[1:]...))
					break
				}
			}
		}
	}
	return jumps, chains
}

// splitRule splits an iptables-save rule into arguments, keeping quoted
// strings (comments) whole.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, had := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote, had = !inQuote, true
		case c == ' ' && !inQuote:
			if cur.Len() > 0 || had {
				out = append(out, cur.String())
				cur.Reset()
				had = false
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 || had {
		out = append(out, cur.String())
	}
	return out
}

// ownChainsPresent lists the own chains of both families, for the
// preflight (a machine that already runs kube-proxy or a kubelet is not
// one to start this node on) and for tests.
func ownChainsPresent() ([]string, error) {
	var out []string
	for _, fam := range []string{"iptables", "ip6tables"} {
		save, err := exec.Command(fam + "-save").Output()
		if err != nil {
			return nil, fmt.Errorf("%s-save: %w", fam, err)
		}
		_, chains := residueRules(string(save))
		for t, cs := range chains {
			for _, c := range cs {
				out = append(out, fmt.Sprintf("%s %s/%s", fam, t, c))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// removeIPTablesResidue removes what kube-proxy --cleanup leaves: the
// kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
// KUBE-IPTABLES-HINT), CNI chains, and the jumps to them.
func removeIPTablesResidue() error {
	var errs []error
	for _, fam := range []string{"iptables", "ip6tables"} {
		save, err := exec.Command(fam + "-save").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-save: %w", fam, err))
			continue
		}
		jumps, chains := residueRules(string(save))
		for t, rules := range jumps {
			for _, r := range rules {
				if out, err := exec.Command(fam, append([]string{"-w", "-t", t}, r...)...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s %s: %v: %s", fam, t, strings.Join(r, " "), err, out))
				}
			}
		}
		for t, cs := range chains {
			for _, op := range []string{"-F", "-X"} {
				for _, c := range cs {
					if out, err := exec.Command(fam, "-w", "-t", t, op, c).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("%s -t %s %s %s: %v: %s", fam, t, op, c, err, out))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// --- mounts ------------------------------------------------------------

// mountsUnder lists the mount points at or under any of roots, deepest
// first (the order to unmount them in).
func mountsUnder(data string, roots ...string) []string {
	var out []string
	for _, e := range parseMounts(data) {
		for _, r := range roots {
			if e.Point == r || strings.HasPrefix(e.Point, r+"/") {
				out = append(out, e.Point)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// unmountUnder unmounts every mount under roots; a busy one is detached.
func unmountUnder(roots ...string) error {
	var errs []error
	for pass := 0; pass < 3; pass++ {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		mps := mountsUnder(string(mi), roots...)
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err2 := unix.Unmount(mp, unix.MNT_DETACH); err2 != nil {
					errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// --- cgroups -----------------------------------------------------------

// createCgroups creates the kubelet's cgroup root in every v1 hierarchy
// (the kubelet requires it to exist); cpuset gets its parent's CPUs and
// memory nodes, which a new v1 cpuset cgroup lacks.
func (l Layout) createCgroups() error {
	hs, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, h := range hs {
		base := filepath.Join("/sys/fs/cgroup", h.Name())
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		dir := filepath.Join(base, l.CgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if h.Name() == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(base, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
				}
				if err != nil {
					return fmt.Errorf("cgroup %s: %s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroup tree from every v1 hierarchy
// (the kubelet's cgroupRoot), deepest first. Only empty cgroups can go;
// the processes in them were stopped before.
func (l Layout) removeCgroups() error {
	hs, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join("/sys/fs/cgroup", h.Name(), l.CgroupRoot)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.SliceStable(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// --- processes -----------------------------------------------------------

// pidsWithArg lists the processes whose command line holds arg (the
// containerd shims of this node name its socket).
func pidsWithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(cmd), "\x00") {
			if a == arg {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
