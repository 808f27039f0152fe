package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"nodemend.dev/nodemend/internal/mountinfo"
)

// found is the machine as Start found it, recorded before anything is
// created, so that Stop puts back exactly that.
type found struct {
	// Sysctls holds the values of every tunable the node's components
	// change.
	Sysctls map[string]string `json:"sysctls"`
	// Absent are the fixed host paths that did not exist (the components
	// create them; Stop removes them).
	Absent []string `json:"absent"`
	// RootPrivate: / was a private mount, made shared for the node (a
	// container's HostToContainer mount needs a shared or slave source, as
	// on every systemd host); Stop makes it private again.
	RootPrivate bool `json:"rootPrivate"`
	// Propagation is each mount point's propagation as start found it
	// (private, shared, master, shared,master or unbindable; for a path
	// mounted over, the visible mount's). Making / rshared changes every
	// mount below it too, and a bare rprivate at Stop would turn a mount
	// that was shared before (/run/netns after `ip netns add`) private:
	// Stop shares those again (propagationRestore).
	Propagation map[string]string `json:"propagation,omitempty"`
}

// changedSysctls are the tunables the node's components may change: the
// kubelet sets the first six at start (container_manager_linux.go
// setupKernelTunables); kube-proxy and the CNI bridge plugin the others
// unless told not to, which the node's configs do.
func changedSysctls() []string {
	return []string{
		"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
		"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/route_localnet",
		"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	}
}

// kubeletTunables are the ones the kubelet sets once, at start: they are
// put back as soon as it has (panic on oops has no place on a shared
// machine), and again by Stop.
func kubeletTunables() []string {
	return changedSysctls()[:6]
}

// fixedHostPaths are the paths outside Var and Run that the components
// create and that cannot be moved: the kubelet's container log links,
// containerd's shim sockets (/run/containerd/s) and network namespaces,
// libcni's result cache, the kubelet's device-plugin socket directory
// (/var/lib/kubelet/device-plugins, fixed whatever --root-dir says), and the
// chart's agent hostPath directories.
func fixedHostPaths() []string {
	return []string{"/var/log/containers", "/run/containerd", "/run/netns", "/var/lib/cni", "/var/lib/kubelet",
		"/var/lib/nodemend", "/var/log/nodemend"}
}

func sysctlPath(key string) string { return filepath.Join("/proc/sys", key) }

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(key))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// recordFound reads the machine's state before the node touches it.
func recordFound() (found, error) {
	f := found{Sysctls: map[string]string{}}
	for _, k := range changedSysctls() {
		v, err := readSysctl(k)
		if errors.Is(err, os.ErrNotExist) {
			continue // not on this kernel: nothing can change it
		}
		if err != nil {
			return f, err
		}
		f.Sysctls[k] = v
	}
	for _, p := range fixedHostPaths() {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			f.Absent = append(f.Absent, p)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return f, err
	}
	f.RootPrivate = rootIsPrivate(string(mi))
	f.Propagation = mountPropagation(string(mi))
	return f, nil
}

// mountPropagation maps each mount point to its propagation kind; for a
// path mounted over, the last (visible) mount wins. A line that does not
// parse is left out.
func mountPropagation(data string) map[string]string {
	out := map[string]string{}
	for _, e := range parseMounts(data) {
		out[e.Point] = propagationKind(e.Optional)
	}
	return out
}

// parseMounts reads what it can of a mountinfo file.
func parseMounts(data string) []mountinfo.Entry {
	var out []mountinfo.Entry
	for _, line := range strings.Split(data, "\n") {
		if e, err := mountinfo.ParseLine(line); err == nil {
			out = append(out, e)
		}
	}
	return out
}

// propagationKind reads a mount's optional fields as a kind without peer
// group numbers, which change with every remount: private, shared, master,
// shared,master or unbindable.
func propagationKind(optional []string) string {
	var kinds []string
	for _, o := range optional {
		k, _, _ := strings.Cut(o, ":")
		if k == "shared" || k == "master" || k == "unbindable" {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return "private"
	}
	return strings.Join(kinds, ",")
}

// propagationChange is one mount(2) propagation change Stop makes.
type propagationChange struct {
	Path string
	// Kind is "shared" (MS_SHARED) or "unbindable" (MS_UNBINDABLE).
	Kind string
}

// propagationRestore is how Stop undoes start's `mount --make-rshared /`:
// first `mount --make-rprivate /`, which puts back every mount that was
// private — covered ones too (a second /dev/pts over the first), which no
// change by path reaches — and then these changes, by path, for the mounts
// that were shared or unbindable before (/run/netns after `ip netns add`).
// A mount that was a slave cannot be made one again once private (its
// master is gone); lost names those, for Stop to report.
func propagationRestore(before map[string]string) (changes []propagationChange, lost []string) {
	for mp, kind := range before {
		switch kind {
		case "shared":
			changes = append(changes, propagationChange{mp, "shared"})
		case "unbindable":
			changes = append(changes, propagationChange{mp, "unbindable"})
		case "master", "shared,master":
			lost = append(lost, mp)
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	sort.Strings(lost)
	return changes, lost
}

// rootIsPrivate reports whether the mount at / has no propagation fields
// (shared:N, master:N) in mountinfo.
func rootIsPrivate(data string) bool {
	for _, e := range parseMounts(data) {
		if e.Point == "/" {
			k := propagationKind(e.Optional)
			return k == "private" || k == "unbindable"
		}
	}
	return false
}

func (l Layout) saveFound(f found) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.foundFile(), data, 0o644)
}

func (l Layout) loadFound() (found, bool, error) {
	data, err := os.ReadFile(l.foundFile())
	if errors.Is(err, os.ErrNotExist) {
		return found{}, false, nil
	}
	if err != nil {
		return found{}, false, err
	}
	var f found
	if err := json.Unmarshal(data, &f); err != nil {
		return found{}, false, fmt.Errorf("%s: %w", l.foundFile(), err)
	}
	return f, true, nil
}

// restoreSysctls writes back every recorded value that differs now.
func restoreSysctls(f found, keys []string) error {
	var errs []error
	for _, k := range keys {
		want, ok := f.Sysctls[k]
		if !ok {
			continue
		}
		if got, err := readSysctl(k); err == nil && got == want {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s=%s: %w", strings.ReplaceAll(k, "/", "."), want, err))
		}
	}
	return errors.Join(errs...)
}
