// Package realnode runs one real Kubernetes node on the machine itself: a
// control plane (etcd, kube-apiserver with NodeRestriction, scheduler,
// controller-manager), containerd with runc and the CNI bridge plugin,
// a kubelet with its own system:node client certificate and kube-proxy —
// and installs nodemend's chart on it from locally built images.
//
// It is the tier that proves the simulation's claims on a real kubelet
// (hack/real-node.sh, make e2e-node; docs/install.md "Try it on a real
// node"). Everything it creates carries its own names, addresses, ports and
// directories, is recorded before it is created, and is removed by Stop,
// which leaves the machine as Start found it.
package realnode

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
)

// Layout is where the node lives: names, addresses, ports and directories.
// Everything is dedicated to it, so that nothing collides with a system
// containerd or kubelet, the local simulation, or another test.
type Layout struct {
	// Repo is the repository root: the chart, _output/images.
	Repo string
	// State holds what the node's processes read and what tells a later
	// stop what was started: certificates, kubeconfigs, configs, PID files,
	// logs. Under the repository's _output; kept after Stop for its logs.
	State string
	// Var is the persistent root of the node's daemons (kubelet root dir,
	// containerd root, CNI IPAM state); Run their runtime state (the
	// containerd socket). Both are removed by Stop.
	Var, Run string
	// CgroupRoot is the kubelet's cgroup root: every pod cgroup lives under
	// it in each cgroup v1 hierarchy.
	CgroupRoot string

	NodeName string
	// NodeLink carries the node's address (a veth pair: NodeLink and
	// NodeLink+"p", both ends in the host namespace, so the link has a
	// carrier). The address is local: nothing leaves the machine.
	NodeLink string
	NodeIP   netip.Addr
	// Bridge is the pod network's bridge, with Gateway on it; pods get
	// addresses of PodCIDR and routes to ServiceCIDR and NodeIP only.
	Bridge      string
	PodCIDR     netip.Prefix
	Gateway     netip.Addr
	ServiceCIDR netip.Prefix

	Ports Ports
}

// Ports of the node's components; every one is checked free before start.
type Ports struct {
	Etcd, EtcdPeer, APIServer, ControllerManager, Scheduler int
	Kubelet, KubeletHealthz, ProxyHealthz, ProxyMetrics     int
	// Metadata is AWS's EC2 metadata mock, the agent's cloud metadata service.
	Metadata int
}

// List names every port, for the free-port check and messages.
func (p Ports) List() []NamedPort {
	return []NamedPort{
		{"etcd", p.Etcd}, {"etcd peer", p.EtcdPeer}, {"kube-apiserver", p.APIServer},
		{"kube-controller-manager", p.ControllerManager}, {"kube-scheduler", p.Scheduler},
		{"kubelet", p.Kubelet}, {"kubelet healthz", p.KubeletHealthz},
		{"kube-proxy healthz", p.ProxyHealthz}, {"kube-proxy metrics", p.ProxyMetrics},
		{"ec2-metadata-mock", p.Metadata},
	}
}

// NamedPort is a port and the component that binds it.
type NamedPort struct {
	Name string
	Port int
}

// DefaultPortBase is the first of the node's ports (NODEMEND_NODE_PORT_BASE).
const DefaultPortBase = 36400

// PortsFrom lays the ports out from base.
func PortsFrom(base int) Ports {
	return Ports{
		Etcd: base + 79, EtcdPeer: base + 80, APIServer: base + 43,
		ControllerManager: base + 57, Scheduler: base + 59,
		Kubelet: base + 50, KubeletHealthz: base + 48, ProxyHealthz: base + 56, ProxyMetrics: base + 49,
		Metadata: base + 54,
	}
}

// DefaultLayout is the node's layout for a repository, with the
// environment's overrides: NODEMEND_NODE_STATE_DIR (default
// <repo>/_output/real-node) and NODEMEND_NODE_PORT_BASE (default 36400).
func DefaultLayout(repo string) (Layout, error) {
	l := Layout{
		Repo:        repo,
		State:       filepath.Join(repo, "_output", "real-node"),
		Var:         "/var/lib/nodemend-node",
		Run:         "/run/nodemend-node",
		CgroupRoot:  "/nodemend-node",
		NodeName:    "nodemend-node",
		NodeLink:    "nmnode0",
		NodeIP:      netip.MustParseAddr("10.238.0.1"),
		Bridge:      "nmnodebr0",
		PodCIDR:     netip.MustParsePrefix("10.239.0.0/24"),
		Gateway:     netip.MustParseAddr("10.239.0.1"),
		ServiceCIDR: netip.MustParsePrefix("10.237.0.0/24"),
		Ports:       PortsFrom(DefaultPortBase),
	}
	if d := os.Getenv("NODEMEND_NODE_STATE_DIR"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return l, err
		}
		l.State = abs
	}
	if b := os.Getenv("NODEMEND_NODE_PORT_BASE"); b != "" {
		base, err := strconv.Atoi(b)
		if err != nil || base < 1024 || base > 65535-100 {
			return l, fmt.Errorf("NODEMEND_NODE_PORT_BASE=%q: want a number from 1024 to %d (the node uses the 100 ports from it)", b, 65535-100)
		}
		l.Ports = PortsFrom(base)
	}
	return l, nil
}

// APIServerURL is where every component and pod reaches the API server.
func (l Layout) APIServerURL() string {
	return fmt.Sprintf("https://%s", netip.AddrPortFrom(l.NodeIP, uint16(l.Ports.APIServer)))
}

// CRISocket is containerd's socket.
func (l Layout) CRISocket() string { return filepath.Join(l.Run, "containerd", "containerd.sock") }

// KubeletRoot is the kubelet's --root-dir.
func (l Layout) KubeletRoot() string { return filepath.Join(l.Var, "kubelet") }

// ContainerdRoot is containerd's root directory.
func (l Layout) ContainerdRoot() string { return filepath.Join(l.Var, "containerd") }

// KubernetesServiceIP is the first address of the service range, the
// kubernetes Service's ClusterIP.
func (l Layout) KubernetesServiceIP() netip.Addr { return l.ServiceCIDR.Addr().Next() }

// Admin is the admin kubeconfig, printed last by start.
func (l Layout) Admin() string { return filepath.Join(l.State, "admin.kubeconfig") }

func (l Layout) pki(name string) string  { return filepath.Join(l.State, "pki", name) }
func (l Layout) conf(name string) string { return filepath.Join(l.State, "conf", name) }

// LogDir holds one log file per process.
func (l Layout) LogDir() string { return filepath.Join(l.State, "logs") }

func (l Layout) pidDir() string { return filepath.Join(l.State, "pids") }

// foundFile records the machine as start found it (found.go).
func (l Layout) foundFile() string { return filepath.Join(l.State, "found.json") }
