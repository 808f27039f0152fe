package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// hostFacts is what the preflight reads of the machine; checkHost judges it
// without I/O.
type hostFacts struct {
	UID int
	// Missing are the commands and files not found, by path or name.
	Missing []string
	// Cgroups is /proc/cgroups; Mountinfo /proc/self/mountinfo;
	// Filesystems /proc/filesystems.
	Cgroups, Mountinfo, Filesystems string
	Kmsg                            bool
	// Listening are the TCP ports something listens on (/proc/net/tcp,
	// tcp6), with the socket inode.
	Listening map[int]bool
	// Leftovers: what a node that was not stopped left (PID files, links,
	// directories) — stop clears them.
	Leftovers []string
	// Running are recorded daemons that still run.
	Running []string
	// ForeignChains are KUBE-/CNI- iptables chains: another kube-proxy or
	// kubelet runs on this machine.
	ForeignChains []string
}

// requirement is a command or file the node runs, and its Debian package.
type requirement struct{ name, pkg string }

func requirements() []requirement {
	return []requirement{
		{"containerd", "containerd"}, {"containerd-shim-runc-v2", "containerd"}, {"ctr", "containerd"},
		{"runc", "runc"},
		{filepath.Join(CNIBinDir, "bridge"), "containernetworking-plugins"},
		{filepath.Join(CNIBinDir, "host-local"), "containernetworking-plugins"},
		{filepath.Join(CNIBinDir, "loopback"), "containernetworking-plugins"},
		{"iptables", "iptables"}, {"iptables-save", "iptables"}, {"ip6tables", "iptables"}, {"ip6tables-save", "iptables"},
	}
}

// Packages are the Debian packages the node needs (hack/real-node.sh
// installs the missing ones).
func Packages() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range requirements() {
		if !seen[r.pkg] {
			seen[r.pkg] = true
			out = append(out, r.pkg)
		}
	}
	return out
}

// cgroupControllers are the v1 controllers the kubelet and runc need.
func cgroupControllers() []string {
	return []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer"}
}

// checkHost returns one line per problem, each saying what to do.
func checkHost(h hostFacts, l Layout) []string {
	var p []string
	if h.UID != 0 {
		p = append(p, "run as root: the node creates network links, mounts and cgroups")
	}
	if len(h.Missing) > 0 {
		pkgs := map[string]bool{}
		for _, r := range requirements() {
			for _, m := range h.Missing {
				if m == r.name {
					pkgs[r.pkg] = true
				}
			}
		}
		var names []string
		for n := range pkgs {
			names = append(names, n)
		}
		sort.Strings(names)
		p = append(p, fmt.Sprintf("missing %s: apt-get install %s (hack/real-node.sh installs them)",
			strings.Join(h.Missing, ", "), strings.Join(names, " ")))
	}
	if !strings.Contains(h.Filesystems, "\toverlay\n") && !strings.HasSuffix(h.Filesystems, "\toverlay") {
		p = append(p, "the kernel has no overlay filesystem (CONFIG_OVERLAY_FS): containerd's snapshotter needs it")
	}
	if !h.Kmsg {
		p = append(p, "/dev/kmsg is missing: the agent's kernel monitor and the kernel-log scenario read it")
	}
	if !cgroupV2Only(h.Mountinfo) {
		enabled := enabledControllers(h.Cgroups)
		mounted := mountedControllers(h.Mountinfo)
		var missing []string
		for _, c := range cgroupControllers() {
			if !enabled[c] || !mounted[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			p = append(p, fmt.Sprintf("cgroup controllers %s are not enabled and mounted (/proc/cgroups, /sys/fs/cgroup): the kubelet and runc need them",
				strings.Join(missing, ", ")))
		}
	}
	for _, np := range l.Ports.List() {
		if h.Listening[np.Port] {
			p = append(p, fmt.Sprintf("port %d (%s) is in use: stop what listens there (ss -ltnp 'sport = :%d'), or move the node's ports with NODEMEND_NODE_PORT_BASE",
				np.Port, np.Name, np.Port))
		}
	}
	if len(h.Running) > 0 {
		p = append(p, fmt.Sprintf("the node already runs (%s): hack/real-node.sh status, or hack/real-node.sh stop first", strings.Join(h.Running, ", ")))
	} else if len(h.Leftovers) > 0 {
		p = append(p, fmt.Sprintf("a node that was not stopped left %s: run hack/real-node.sh stop, which removes it", strings.Join(h.Leftovers, ", ")))
	}
	if len(h.ForeignChains) > 0 && len(h.Running) == 0 && len(h.Leftovers) == 0 {
		p = append(p, fmt.Sprintf("iptables already holds Kubernetes or CNI chains (%s): another kubelet or kube-proxy runs here; this node must be the only one",
			strings.Join(h.ForeignChains, ", ")))
	}
	return p
}

// cgroupV2Only reports a unified hierarchy mounted at /sys/fs/cgroup.
func cgroupV2Only(mountinfo string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 10 && f[4] == "/sys/fs/cgroup" {
			for i, x := range f {
				if x == "-" && i+1 < len(f) {
					return f[i+1] == "cgroup2"
				}
			}
		}
	}
	return false
}

// enabledControllers parses /proc/cgroups (subsys_name hierarchy
// num_cgroups enabled).
func enabledControllers(procCgroups string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(procCgroups, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && !strings.HasPrefix(f[0], "#") && f[3] == "1" {
			out[f[0]] = true
		}
	}
	return out
}

// mountedControllers lists the controllers of the cgroup v1 mounts.
func mountedControllers(mountinfo string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+3 < len(f) && f[i+1] == "cgroup" {
				for _, o := range strings.Split(f[i+3], ",") {
					out[o] = true
				}
			}
		}
	}
	return out
}

// listeningPorts parses /proc/net/tcp or tcp6: local ports in state 0A
// (LISTEN).
func listeningPorts(procNetTCP string, into map[int]bool) {
	for _, line := range strings.Split(procNetTCP, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		port, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err == nil {
			into[int(port)] = true
		}
	}
}

// listeningNow is the TCP ports something listens on, IPv4 and IPv6.
func listeningNow() map[int]bool {
	ports := map[int]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		listeningPorts(string(b), ports)
	}
	return ports
}

// daemonNames are the node's processes, in start order; the metadata mock
// runs only where start was given one (optionalDaemon).
func daemonNames() []string {
	return []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet",
		"ec2-metadata-mock", "kube-proxy"}
}

// optionalDaemon is a daemon whose absence is no fault (Status).
func optionalDaemon(name string) bool { return name == "ec2-metadata-mock" }

// gatherFacts reads the machine for checkHost.
func (l Layout) gatherFacts() hostFacts {
	h := hostFacts{UID: os.Getuid()}
	for _, r := range requirements() {
		if strings.HasPrefix(r.name, "/") {
			if _, err := os.Stat(r.name); err != nil {
				h.Missing = append(h.Missing, r.name)
			}
		} else if _, err := exec.LookPath(r.name); err != nil {
			h.Missing = append(h.Missing, r.name)
		}
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	h.Cgroups, h.Mountinfo, h.Filesystems = read("/proc/cgroups"), read("/proc/self/mountinfo"), read("/proc/filesystems")
	_, err := os.Stat("/dev/kmsg")
	h.Kmsg = err == nil
	h.Listening = listeningNow()
	for _, n := range daemonNames() {
		d, ok, err := l.recorded(n)
		switch {
		case err != nil:
			h.Leftovers = append(h.Leftovers, l.pidFile(n))
		case ok && d.alive():
			h.Running = append(h.Running, fmt.Sprintf("%s pid %d", n, d.Pid))
		case ok:
			h.Leftovers = append(h.Leftovers, fmt.Sprintf("the PID file of %s (pid %d, gone)", n, d.Pid))
		}
	}
	for _, name := range []string{l.NodeLink, l.Bridge} {
		if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err == nil {
			h.Leftovers = append(h.Leftovers, "the link "+name)
		}
	}
	for _, d := range []string{l.Var, l.Run} {
		if _, err := os.Stat(d); err == nil {
			h.Leftovers = append(h.Leftovers, d)
		}
	}
	if _, err := os.Stat(l.foundFile()); err == nil {
		h.Leftovers = append(h.Leftovers, l.foundFile())
	}
	if missingIPTables(h.Missing) {
		return h
	}
	if chains, err := ownChainsPresent(); err == nil {
		h.ForeignChains = chains
	}
	return h
}

func missingIPTables(missing []string) bool {
	for _, m := range missing {
		if strings.HasPrefix(m, "ip") && strings.Contains(m, "tables") {
			return true
		}
	}
	return false
}

// Preflight checks the machine; the error lists every problem.
func (l Layout) Preflight() error {
	if p := checkHost(l.gatherFacts(), l); len(p) > 0 {
		return errors.New("the node cannot start here:\n  - " + strings.Join(p, "\n  - "))
	}
	return nil
}
