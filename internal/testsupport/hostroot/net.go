package hostroot

import (
	"fmt"
	"os"
	"path/filepath"
)

// WithNetSysctls writes the network files of /proc for a healthy Kubernetes
// node: IPv4 forwarding on, nf_conntrack loaded with a small table far from
// its maximum. These files are per network namespace on a real host.
func (r *Root) WithNetSysctls() *Root {
	r.t.Helper()
	r.WriteFile("proc/sys/net/ipv4/ip_forward", "1\n")
	r.SetConntrack(1024, 262144)
	return r
}

// SetConntrack writes nf_conntrack_count and nf_conntrack_max.
func (r *Root) SetConntrack(count, max uint64) {
	r.t.Helper()
	r.WriteFile("proc/sys/net/netfilter/nf_conntrack_count", fmt.Sprintf("%d\n", count))
	r.WriteFile("proc/sys/net/netfilter/nf_conntrack_max", fmt.Sprintf("%d\n", max))
}

// AddCNIConfig writes /etc/cni/net.d/<name> with a minimal conflist, as a
// CNI agent does when it starts (e.g. "10-aws.conflist").
func (r *Root) AddCNIConfig(name string) {
	r.t.Helper()
	r.WriteFile("etc/cni/net.d/"+name, `{"cniVersion":"1.0.0","name":"fixture","plugins":[{"type":"fixture"}]}`+"\n")
}

// Symlink makes rel a symbolic link to target, an absolute path outside the
// root (e.g. a network namespace file such as /proc/<pid>/fd/<fd>, which the
// agent opens as <root>/<rel>).
func (r *Root) Symlink(rel, target string) {
	r.t.Helper()
	p := r.Path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		r.t.Fatal(err)
	}
}
