package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
)

// Trace is what the node could leave on the machine, read so that a test
// compares the machine before start and after stop.
type Trace struct {
	// Sections by name ("iptables", "mounts", "links", ...), each a sorted
	// list of lines.
	Sections map[string][]string
}

// otherTestLink matches the host-namespace veths that other packages'
// tests create while this one runs (internal/netnstest: nmt<pid>-<n>a):
// not the node's, and not stable.
var otherTestLink = regexp.MustCompile(`^nmt\d+-\d+[ab]$`)

// TakeTrace reads the machine, and which of the node's ports something
// listens on (a daemon stop forgot keeps its port, and the next start
// refuses). Mounts under the temporary directory are left out: other tests
// mount tmpfs there concurrently, and the node never mounts anything there.
func TakeTrace(ports Ports) (Trace, error) {
	t := Trace{Sections: map[string][]string{}}
	listening := listeningNow()
	for _, p := range ports.List() {
		if listening[p.Port] {
			t.Sections["listening"] = append(t.Sections["listening"], fmt.Sprintf("%s %d", p.Name, p.Port))
		}
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(fam + "-save").Output()
		if err != nil {
			return t, fmt.Errorf("%s-save: %w", fam, err)
		}
		t.Sections[fam] = normalizeIPTables(string(out))
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return t, err
	}
	t.Sections["mounts"] = normalizeMounts(string(mi), os.TempDir())
	links, err := netlink.LinkList()
	if err != nil {
		return t, err
	}
	for _, l := range links {
		a := l.Attrs()
		if otherTestLink.MatchString(a.Name) {
			continue
		}
		line := fmt.Sprintf("%s %s %s", a.Name, l.Type(), a.Flags)
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
		for _, ad := range addrs {
			line += " " + ad.IPNet.String()
		}
		t.Sections["links"] = append(t.Sections["links"], line)
	}
	routes, _ := netlink.RouteList(nil, netlink.FAMILY_ALL)
	for _, r := range routes {
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && otherTestLink.MatchString(l.Attrs().Name) {
			continue
		}
		t.Sections["routes"] = append(t.Sections["routes"], r.String())
	}
	for _, k := range changedSysctls() {
		if v, err := readSysctl(k); err == nil {
			t.Sections["sysctls"] = append(t.Sections["sysctls"], k+"="+v)
		}
	}
	paths := append(fixedHostPaths(), "/var/lib/nodemend-node", "/run/nodemend-node", "/opt/containerd",
		"/usr/libexec/kubernetes", "/etc/kubernetes", "/var/lib/containerd", "/var/log/pods", "/etc/cni")
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Sections["paths"] = append(t.Sections["paths"], p)
		}
	}
	for _, dir := range []string{"/run/netns"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Sections["netns"] = append(t.Sections["netns"], filepath.Join(dir, e.Name()))
		}
	}
	hs, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hs {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h.Name()))
		for _, e := range ents {
			if e.IsDir() {
				t.Sections["cgroups"] = append(t.Sections["cgroups"], h.Name()+"/"+e.Name())
			}
		}
	}
	for _, s := range t.Sections {
		sort.Strings(s)
	}
	return t, nil
}

// normalizeIPTables drops comments, packet counters and empty tables. A
// table the kernel created on first use (a fresh machine's first start
// loads them) holds only its built-in chains with policy ACCEPT and no
// rule: it filters nothing, as when it was not there, so it is no trace.
func normalizeIPTables(save string) []string {
	var out, table []string
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	empty := true
	for _, line := range strings.Split(save, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = counters.ReplaceAllString(line, "")
		switch {
		case strings.HasPrefix(line, "*"):
			table, empty = []string{line}, true
		case line == "COMMIT":
			if !empty {
				out = append(out, table...)
				out = append(out, line)
			}
			table = nil
		case table != nil:
			table = append(table, line)
			empty = empty && builtinAcceptChain.MatchString(line)
		default:
			out = append(out, line)
		}
	}
	return append(out, table...)
}

var builtinAcceptChain = regexp.MustCompile(`^:(INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ACCEPT\s*$`)

// normalizeMounts keeps mount point, file system type, source and
// propagation of each mount, outside skip. Peer group numbers change with
// every remount; their kind (shared, master) is what the node may change.
func normalizeMounts(data, skip string) []string {
	var out []string
	for _, e := range parseMounts(data) {
		if skip != "" && (e.Point == skip || strings.HasPrefix(e.Point, strings.TrimSuffix(skip, "/")+"/")) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", e.Point, e.FSType, e.Source, propagationKind(e.Optional)))
	}
	return out
}

// Diff lists what differs between two traces: "+" for what after has and
// before had not, "-" for the reverse, by section.
func Diff(before, after Trace) []string {
	var out []string
	names := map[string]bool{}
	for n := range before.Sections {
		names[n] = true
	}
	for n := range after.Sections {
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		b, a := count(before.Sections[n]), count(after.Sections[n])
		for line, k := range a {
			for i := b[line]; i < k; i++ {
				out = append(out, fmt.Sprintf("%s: + %s", n, line))
			}
		}
		for line, k := range b {
			for i := a[line]; i < k; i++ {
				out = append(out, fmt.Sprintf("%s: - %s", n, line))
			}
		}
	}
	sort.Strings(out)
	return out
}

func count(lines []string) map[string]int {
	m := map[string]int{}
	for _, l := range lines {
		m[l]++
	}
	return m
}
