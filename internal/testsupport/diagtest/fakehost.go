// Package diagtest builds a fake host for diagnostics tests: a host root with
// a file for every collector, scripted commands, a fake netlink, a fake CRI
// runtime, and secrets planted in the places the redactor must clean
// (kubeconfigs, process environments, command lines, logs, runtime and agent
// config). Formats follow what real hosts and tools write.
package diagtest

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/fakecri"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
)

// Host is a fake node.
type Host struct {
	Root    *hostroot.Root
	Script  *command.Script
	Netlink *Netlink
	CRI     *fakecri.Server
	// Secrets are planted in the host's files, environments and tool
	// outputs; none may appear in a bundle.
	Secrets []string
	// EffectiveConfig stands for the agent's config (with a planted secret).
	EffectiveConfig map[string]any
	// DiskFull is the host's disk as the capture's disk guard reads it
	// (diagnostics.Options.DiskFull): with room. Left to the real statfs,
	// the fake root's file system is the test machine's own disk, which a
	// build can fill past the guard's 90% (a cold make test's caches did),
	// failing captures that test something else. The guard's own tests set
	// it full.
	DiskFull func(dir string) (bool, error)
}

// The planted secrets, each unique so that a leak is found by substring.
const (
	secretBearer        = "plantedBearerToken0123456789abcdef"
	secretJWT           = "eyJhbGciOiJSUzI1NiIsImtpZCI6InBsYW50ZWQifQ.eyJzdWIiOiJzeXN0ZW06bm9kZTpwbGFudGVkIn0.cGxhbnRlZC1zaWduYXR1cmUtYnl0ZXM"
	secretKubeToken     = "plantedkube.0123456789abcdef"
	secretAWS           = "plantedAwsSecretAccessKey/K7MDENG/bPxRfiCY"
	secretDBPassword    = "planted-db-password-Zq9"
	secretCmdlineToken  = "plantedCmdlineToken4242"
	secretRegistryPass  = "planted-registry-password-77"
	secretRegistryAuth  = "cGxhbnRlZDpyZWdpc3RyeWF1dGg="
	secretConfigToken   = "planted-agent-config-token"
	secretPEMBody       = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDplantedPEMbody"
	secretJournalPass   = "plantedJournalPassword99"
	secretURLPassword   = "plantedUrlPassword55"
	secretInlineKeyData = "plantedInlineKeyData"
)

// kubeletPEMKey is a private key in PEM form (body planted).
func kubeletPEMKey() string {
	return "-----BEGIN RSA PRIVATE KEY-----\n" + secretPEMBody + "\n" + secretInlineKeyData + "AAAA\n-----END RSA PRIVATE KEY-----\n"
}

// NewHost builds a fake host under t.TempDir(). The CRI server is stopped
// at cleanup.
func NewHost(t testing.TB) *Host {
	t.Helper()
	r := hostroot.New(t).WithProc()
	h := &Host{Root: r, Script: command.NewScript(), Netlink: DefaultNetlink(), DiskFull: func(string) (bool, error) { return false, nil }}
	keyData := base64.StdEncoding.EncodeToString([]byte(kubeletPEMKey()))
	h.Secrets = []string{secretBearer, secretJWT, secretKubeToken, secretAWS, secretDBPassword, secretCmdlineToken,
		secretRegistryPass, secretRegistryAuth, secretConfigToken, secretPEMBody, secretInlineKeyData, secretJournalPass,
		secretURLPassword, keyData}

	// base
	r.WriteFile("etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n")
	r.WriteFile("etc/hostname", "ip-10-0-1-23\n")
	r.WriteFile("etc/machine-id", "3f1c2a9e8b7d4c6f9a0b1c2d3e4f5a6b\n")
	r.WriteFile("proc/version", "Linux version 6.1.0-21-cloud-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.90-1 (2024-05-03)\n")
	r.WriteFile("proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-21-cloud-amd64 root=PARTUUID=8f2c1a-01 ro console=ttyS0 nvme_core.io_timeout=4294967295\n")
	r.WriteFile("proc/sys/kernel/hostname", "ip-10-0-1-23\n")
	r.WriteFile("proc/sys/kernel/osrelease", "6.1.0-21-cloud-amd64\n")
	r.WriteFile("proc/sys/kernel/tainted", "0\n")
	r.WriteFile("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n")
	r.WriteFile("proc/meminfo", "MemTotal:       16106312 kB\nMemFree:         9182640 kB\nMemAvailable:   13623380 kB\n")
	r.WriteFile("sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
	r.WriteFile("sys/class/dmi/id/product_name", "m6i.xlarge\n")
	r.WriteFile("sys/class/dmi/id/product_uuid", "ec2e1b3a-6c2d-4f7e-9a1b-2c3d4e5f6a7b\n")

	// kernel: /dev/kmsg records (Documentation/ABI/testing/dev-kmsg) and persisted logs
	r.AppendKmsg(
		hostroot.KmsgRecord(6, 1, 0, "Linux version 6.1.0-21-cloud-amd64"),
		hostroot.KmsgRecord(3, 1200, 350123456, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."),
		hostroot.KmsgRecord(4, 1201, 350223456, "nvme nvme0: I/O 12 QID 3 timeout, aborting")+"\n SUBSYSTEM=nvme\n DEVICE=c259:0",
	)
	r.WriteFile("var/log/kern.log", "Jun 12 10:00:01 ip-10-0-1-23 kernel: [350.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n")
	r.WriteFile("proc/modules", "nvidia_uvm 1531904 0 - Live 0x0000000000000000 (POE)\nnvme 57344 2 - Live 0x0000000000000000\n")

	// system
	r.WriteFile("var/log/syslog", "Jun 12 10:00:00 ip-10-0-1-23 systemd[1]: Started kubelet.service.\n"+
		"Jun 12 10:00:02 ip-10-0-1-23 aws-node[2211]: calling https://ec2.amazonaws.com with Authorization: Bearer "+secretBearer+"\n"+
		"Jun 12 10:00:03 ip-10-0-1-23 app[99]: pulling from https://robot:"+secretURLPassword+"@registry.example.com/v2/app\n")
	r.WriteFile("var/log/kubelet.log", "I0612 10:00:01.123456    1034 server.go:487] \"Kubelet version\" kubeletVersion=\"v1.37.2\"\n")
	r.WriteFile("var/log/cloud-init-output.log", "writing key\n"+kubeletPEMKey()+"done\n")
	procEnv := func(pid int, comm, cmdline string, env ...string) {
		r.WriteFile(fmt.Sprintf("proc/%d/cmdline", pid), strings.ReplaceAll(cmdline, " ", "\x00")+"\x00")
		if len(env) > 0 {
			r.WriteFile(fmt.Sprintf("proc/%d/environ", pid), strings.Join(env, "\x00")+"\x00")
		}
	}
	procEnv(1, "systemd", "/sbin/init")
	procEnv(812, "containerd", "/usr/bin/containerd")
	procEnv(1034, "kubelet", "/usr/bin/kubelet --kubeconfig=/var/lib/kubelet/kubeconfig --config=/var/lib/kubelet/config.yaml --token="+secretCmdlineToken+" --node-ip=10.0.1.23",
		"PATH=/usr/bin", "AWS_REGION=us-east-1", "AWS_SECRET_ACCESS_KEY="+secretAWS, "DB_PASSWORD="+secretDBPassword)
	// A kubelet started without systemd writes its log to a file (both
	// standard output and error); containerd's goes to the journal socket.
	r.Symlink("proc/1034/fd/1", "/var/log/kubelet.log")
	r.Symlink("proc/1034/fd/2", "/var/log/kubelet.log")
	r.Symlink("proc/812/fd/1", "socket:[40123]")
	r.WriteFile("proc/pressure/cpu", "some avg10=1.23 avg60=0.98 avg300=0.50 total=123456789\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	r.WriteFile("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	r.WriteFile("proc/pressure/io", "some avg10=4.50 avg60=3.10 avg300=1.00 total=987654\nfull avg10=2.00 avg60=1.50 avg300=0.40 total=456789\n")
	r.WriteFile("proc/vmstat", "nr_free_pages 2295660\noom_kill 3\n")
	r.WriteFile("sys/fs/cgroup/cpu.pressure", "some avg10=1.23 avg60=0.98 avg300=0.50 total=123456789\n")
	r.WriteFile("sys/fs/cgroup/kubepods.slice/cpu.stat", "usage_usec 9000000\nnr_periods 1000\nnr_throttled 10\nthrottled_usec 50000\n")
	r.WriteFile("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cpu.stat",
		"usage_usec 5000000\nnr_periods 600\nnr_throttled 300\nthrottled_usec 9500000\n")
	r.WriteFile("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/memory.events",
		"low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n")
	h.Script.
		Set("journalctl * --unit=kubelet.service", command.Result{Stdout: "2024-06-12T10:00:01.123456+0000 ip-10-0-1-23 kubelet[1034]: E0612 10:00:01.123456 1034 kubelet.go:2345] \"Error syncing pod\" token=\"" + secretJWT + "\"\n"}).
		Set("journalctl * --unit=containerd.service", command.Result{Stdout: "2024-06-12T10:00:00.000001+0000 ip-10-0-1-23 containerd[812]: time=\"2024-06-12T10:00:00Z\" level=info msg=\"starting containerd\" password=" + secretJournalPass + "\n"}).
		Set("journalctl * --unit=crio.service", command.Result{Stdout: "-- No entries --\n"}).
		Set("journalctl * --unit=docker.service", command.Result{Stdout: "-- No entries --\n"}).
		Set("journalctl * --unit=nodemend-agent.service", command.Result{Stdout: "2024-06-12T10:00:05.000000+0000 ip-10-0-1-23 nodemend-agent[3000]: {\"level\":\"info\",\"msg\":\"agent started\"}\n"}).
		Set("journalctl * --priority=warning", command.Result{Stdout: "2024-06-12T10:00:01.000000+0000 ip-10-0-1-23 kernel: nvme nvme0: I/O 12 QID 3 timeout, aborting\n"})

	// runtime
	r.WriteFile("etc/containerd/config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"registry.example.com\".auth]\n"+
		"  username = \"robot\"\n  password = \""+secretRegistryPass+"\"\n  auth = \""+secretRegistryAuth+"\"\n")
	r.WriteFile("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\nmaxPods: 58\n")
	r.WriteFile("var/lib/kubelet/kubeconfig", strings.Join([]string{
		"apiVersion: v1", "kind: Config", "clusters:", "- cluster:",
		"    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwKY201bGRHVnpNQjRYRFRJek1ERXdNVEF3TURBd01Gb1hEVE16TURFd01UQXdNREF3TUZvd0ZURVRNQkVHQTFVRQo=",
		"    server: https://ABCDEF.gr7.us-east-1.eks.amazonaws.com", "  name: kubernetes",
		"users:", "- name: kubelet", "  user:",
		"    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwK",
		"    client-key-data: " + keyData,
		"    token: " + secretKubeToken, "",
	}, "\n"))
	cri, err := fakecri.Start(r.Path("run/containerd/containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cri.Stop)
	cri.RunPod("kube-system", "coredns-5d78c9869d-abcde", "uid-coredns", "coredns")
	cri.RunPod("default", "trainer-0", "uid-trainer", "trainer", "sidecar")
	h.CRI = cri

	// networking
	r.WriteFile("etc/resolv.conf", "search ec2.internal\nnameserver 10.0.0.2\noptions timeout:2 attempts:5\n")
	r.WriteFile("etc/hosts", "127.0.0.1 localhost\n")
	r.WriteFile("proc/sys/net/netfilter/nf_conntrack_count", "1874\n")
	r.WriteFile("proc/sys/net/netfilter/nf_conntrack_max", "262144\n")
	r.WriteFile("proc/net/dev", "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 1234 12 0 0 0 0 0 0 1234 12 0 0 0 0 0 0\n  eth0: 987654321 765432 0 3 0 0 0 0 123456789 345678 0 0 0 0 0 0\n")
	r.WriteFile("proc/net/sockstat", "sockets: used 412\nTCP: inuse 38 orphan 0 tw 12 alloc 45 mem 3\n")
	r.WriteFile("etc/cni/net.d/10-aws.conflist", "{\"cniVersion\":\"1.0.0\",\"name\":\"aws-cni\",\"plugins\":[{\"type\":\"aws-cni\"}]}\n")
	h.Script.
		Set("iptables-save -c", command.Result{Stdout: "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n[12:720] -A INPUT -j KUBE-FIREWALL\nCOMMIT\n"}).
		Set("ip6tables-save -c", command.Result{Stdout: "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"}).
		Set("nft list ruleset", command.Result{Stdout: "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n"}).
		Set("ss -s", command.Result{Stdout: "Total: 412\nTCP:   45 (estab 30, closed 5, orphaned 0, timewait 12)\n"}).
		Set("ss -tuanpi", command.Result{Stdout: "Netid State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\ntcp   LISTEN 0      4096   127.0.0.1:10248    0.0.0.0:*          users:((\"kubelet\",pid=1034,fd=20))\n"})

	// storage
	mkdir := func(rel string) {
		if err := os.MkdirAll(r.Path(rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("var/lib/kubelet")
	r.WriteFile("proc/1/mountinfo", strings.Join([]string{
		"22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,discard",
		"23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw",
		"24 22 259:3 / /var/lib/kubelet rw,relatime shared:2 - xfs /dev/nvme1n1 rw,attr2,inode64",
		"25 22 0:45 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw,relatime - overlay overlay rw",
		"26 22 0:46 / /mnt/with\\040space rw - tmpfs tmpfs rw", "",
	}, "\n"))
	r.WriteFile("proc/mounts", "/dev/nvme0n1p1 / ext4 rw,relatime,discard 0 0\n")
	r.WriteFile("sys/block/nvme0n1/size", "167772160\n")
	r.WriteFile("sys/block/nvme0n1/queue/rotational", "0\n")
	r.WriteFile("sys/block/nvme0n1/device/model", "Amazon Elastic Block Store\n")
	r.WriteFile("sys/block/nvme0n1/stat", "   12345        0   987654    4321    23456        0  1234567    8765        0    12000    13086\n")
	r.WriteFile("proc/diskstats", " 259       0 nvme0n1 12345 0 987654 4321 23456 0 1234567 8765 0 12000 13086 0 0 0 0\n")
	r.WriteFile("proc/partitions", "major minor  #blocks  name\n\n 259        0   83886080 nvme0n1\n")
	h.Script.
		Set("df -PT", command.Result{Stdout: "Filesystem     Type 1024-blocks     Used Available Capacity Mounted on\n/dev/nvme0n1p1 ext4    83873772 21474836  58805280      27% /\n"}).
		Set("df -PTi", command.Result{Stdout: "Filesystem     Type  Inodes  IUsed   IFree IUse% Mounted on\n/dev/nvme0n1p1 ext4 5242880 312345 4930535    6% /\n"})

	// accelerators: an NVIDIA GPU (tool and procfs), and sysfs of an AMD one
	r.WriteFile("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
	r.WriteFile("proc/driver/nvidia/gpus/0000:3b:00.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nGPU UUID: \t GPU-8f2c1a9e-1111-2222-3333-444455556666\nBus Location: \t 0000:3b:00.0\n")
	r.WriteFile("sys/class/drm/card1/device/vendor", "0x1002\n")
	r.WriteFile("sys/class/drm/card1/device/gpu_busy_percent", "37\n")
	r.WriteFile("sys/class/drm/card1/device/mem_info_vram_total", "68702699520\n")
	h.Script.
		Set("nvidia-smi -q", command.Result{Stdout: "\n==============NVSMI LOG==============\n\nTimestamp                                 : Wed Jun 12 10:00:00 2024\nDriver Version                            : 550.54.15\nCUDA Version                              : 12.4\n\nAttached GPUs                             : 1\nGPU 00000000:3B:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"}).
		Set("nvidia-smi topo -m", command.Result{Stdout: "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-47\t0\n"})

	// nodemend
	h.EffectiveConfig = map[string]any{"monitors": map[string]any{"kernel": map[string]any{"enabled": true}},
		"upload": map[string]any{"token": secretConfigToken}}
	return h
}

// Netlink is a fake netlink with fixed state.
type Netlink struct {
	Links  []netlink.Link
	Addrs  map[int][]netlink.Addr
	Routes []netlink.Route
	Rules  []netlink.Rule
	Neighs []netlink.Neigh
}

// DefaultNetlink is a node with lo, eth0 and a pod veth, routes in main and
// a CNI table, and policy rules.
func DefaultNetlink() *Netlink {
	cidr := func(s string) *net.IPNet {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			panic(err)
		}
		n.IP = ip
		return n
	}
	mac, _ := net.ParseMAC("0e:1f:2a:3b:4c:5d")
	lo := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback, OperState: netlink.OperUnknown}}
	eth0 := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 2, Name: "eth0", MTU: 9001, HardwareAddr: mac, Flags: net.FlagUp | net.FlagBroadcast | net.FlagMulticast,
		OperState: netlink.OperUp, Statistics: &netlink.LinkStatistics{RxBytes: 987654321, RxPackets: 765432, RxDropped: 3, TxBytes: 123456789, TxPackets: 345678}}}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Index: 7, Name: "eni1a2b3c4d5e6", MTU: 9001, Flags: net.FlagUp, OperState: netlink.OperUp}}
	return &Netlink{
		Links: []netlink.Link{lo, eth0, veth},
		Addrs: map[int][]netlink.Addr{
			1: {{IPNet: cidr("127.0.0.1/8"), Scope: 254, LinkIndex: 1}},
			2: {{IPNet: cidr("10.0.1.23/24"), LinkIndex: 2, ValidLft: 3412, PreferedLft: 3412}, {IPNet: cidr("fe80::c1f:2aff:fe3b:4c5d/64"), Scope: 253, LinkIndex: 2}},
		},
		Routes: []netlink.Route{
			{Gw: net.ParseIP("10.0.1.1"), LinkIndex: 2, Table: 254, Protocol: 16, Priority: 100},
			{Dst: cidr("10.0.1.0/24"), LinkIndex: 2, Table: 254, Protocol: 2, Scope: netlink.SCOPE_LINK, Src: net.ParseIP("10.0.1.23")},
			{Dst: cidr("10.0.1.77/32"), LinkIndex: 7, Table: 254, Scope: netlink.SCOPE_LINK},
			{Gw: net.ParseIP("10.0.1.1"), LinkIndex: 2, Table: 2},
		},
		Rules: []netlink.Rule{
			{Priority: 0, Table: 255},
			{Priority: 512, Table: 254, Dst: cidr("10.0.1.77/32")},
			{Priority: 1536, Table: 2, Src: cidr("10.0.1.77/32")},
			{Priority: 32766, Table: 254},
		},
		Neighs: []netlink.Neigh{{LinkIndex: 2, IP: net.ParseIP("10.0.1.1"), HardwareAddr: mac, State: 0x02}},
	}
}

// LinkList implements collectors.Netlink.
func (n *Netlink) LinkList() ([]netlink.Link, error) { return n.Links, nil }

// AddrList implements collectors.Netlink.
func (n *Netlink) AddrList(l netlink.Link, _ int) ([]netlink.Addr, error) {
	return n.Addrs[l.Attrs().Index], nil
}

// RouteListFiltered implements collectors.Netlink.
func (n *Netlink) RouteListFiltered(int, *netlink.Route, uint64) ([]netlink.Route, error) {
	return n.Routes, nil
}

// RuleList implements collectors.Netlink.
func (n *Netlink) RuleList(int) ([]netlink.Rule, error) { return n.Rules, nil }

// NeighList implements collectors.Netlink.
func (n *Netlink) NeighList(int, int) ([]netlink.Neigh, error) { return n.Neighs, nil }

// Path is a helper for tests that need a host file's absolute path.
func (h *Host) Path(rel string) string { return filepath.Join(h.Root.Dir, filepath.FromSlash(rel)) }
