package realnode

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func layout(t *testing.T) Layout {
	t.Helper()
	t.Setenv("NODEMEND_NODE_STATE_DIR", "")
	t.Setenv("NODEMEND_NODE_PORT_BASE", "")
	l, err := DefaultLayout("/repo")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A v1 host with every controller, overlay and /dev/kmsg.
const (
	procCgroups = "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t3\t1\t1\ncpu\t1\t1\t1\ncpuacct\t2\t1\t1\nblkio\t7\t1\t1\nmemory\t4\t1\t1\ndevices\t5\t1\t1\nfreezer\t6\t1\t1\npids\t8\t1\t1\n"
	mountinfoV1 = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
33 30 0:29 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
34 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices
36 30 0:32 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
37 30 0:33 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
`
	filesystems = "nodev\tsysfs\nnodev\tproc\n\text4\nnodev\toverlay\n"
)

func healthyHost() hostFacts {
	return hostFacts{UID: 0, Cgroups: procCgroups, Mountinfo: mountinfoV1, Filesystems: filesystems, Kmsg: true, Listening: map[int]bool{22: true}}
}

func TestCheckHost(t *testing.T) {
	l := layout(t)
	for _, tc := range []struct {
		name  string
		edit  func(*hostFacts)
		wants []string // substrings of the problems; none: healthy
	}{
		{name: "healthy v1 host", edit: func(*hostFacts) {}},
		{name: "cgroup v2 only", edit: func(h *hostFacts) {
			h.Cgroups = ""
			h.Mountinfo = "22 1 254:0 / / rw - ext4 /dev/vda rw\n30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
		}},
		{name: "not root", edit: func(h *hostFacts) { h.UID = 1000 }, wants: []string{"run as root"}},
		{name: "missing commands name their package", edit: func(h *hostFacts) { h.Missing = []string{"containerd", "/usr/lib/cni/bridge"} },
			wants: []string{"missing containerd, /usr/lib/cni/bridge: apt-get install containerd containernetworking-plugins"}},
		{name: "no overlay", edit: func(h *hostFacts) { h.Filesystems = "nodev\tproc\n\text4\n" }, wants: []string{"no overlay filesystem"}},
		{name: "no kmsg", edit: func(h *hostFacts) { h.Kmsg = false }, wants: []string{"/dev/kmsg is missing"}},
		{name: "memory controller disabled", edit: func(h *hostFacts) { h.Cgroups = strings.Replace(procCgroups, "memory\t4\t1\t1", "memory\t4\t1\t0", 1) },
			wants: []string{"cgroup controllers memory are not enabled"}},
		{name: "pids not mounted", edit: func(h *hostFacts) { h.Mountinfo = strings.Replace(mountinfoV1, "rw,pids", "rw,net_cls", 1) },
			wants: []string{"cgroup controllers pids are not enabled and mounted"}},
		{name: "port in use", edit: func(h *hostFacts) { h.Listening[l.Ports.APIServer] = true },
			wants: []string{"port 36443 (kube-apiserver) is in use: stop what listens there (ss -ltnp 'sport = :36443'), or move the node's ports with NODEMEND_NODE_PORT_BASE"}},
		{name: "running node", edit: func(h *hostFacts) { h.Running = []string{"kubelet pid 7"}; h.Leftovers = []string{"the link nmnode0"} },
			wants: []string{"the node already runs (kubelet pid 7)"}},
		{name: "leftovers", edit: func(h *hostFacts) { h.Leftovers = []string{"the link nmnode0"} },
			wants: []string{"a node that was not stopped left the link nmnode0: run hack/real-node.sh stop"}},
		{name: "another kube-proxy", edit: func(h *hostFacts) { h.ForeignChains = []string{"iptables nat/KUBE-SERVICES"} },
			wants: []string{"another kubelet or kube-proxy runs here"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyHost()
			tc.edit(&h)
			got := checkHost(h, l)
			if len(got) != len(tc.wants) {
				t.Fatalf("problems %q, want %d like %q", got, len(tc.wants), tc.wants)
			}
			for i, w := range tc.wants {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %q does not say %q", got[i], w)
				}
			}
		})
	}
}

func TestListeningPorts(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:8E7B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:8E7C 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	got := map[int]bool{}
	listeningPorts(tcp, got)
	if !reflect.DeepEqual(got, map[int]bool{36475: true}) {
		t.Fatalf("got %v, want only 36475 (the established socket is not listening)", got)
	}
}

func TestPortLayout(t *testing.T) {
	seen := map[int]string{}
	for _, p := range PortsFrom(DefaultPortBase).List() {
		if other, ok := seen[p.Port]; ok {
			t.Errorf("%s and %s share port %d", p.Name, other, p.Port)
		}
		if p.Port < DefaultPortBase || p.Port >= DefaultPortBase+100 {
			t.Errorf("%s port %d outside the base's 100", p.Name, p.Port)
		}
		seen[p.Port] = p.Name
	}
	t.Setenv("NODEMEND_NODE_PORT_BASE", "80")
	if _, err := DefaultLayout("/repo"); err == nil || !strings.Contains(err.Error(), "1024") {
		t.Errorf("a privileged port base was accepted: %v", err)
	}
}

func TestResidueRules(t *testing.T) {
	save := `# Generated by iptables-save v1.8.9 (nf_tables)
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:MY-CHAIN - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -j MY-CHAIN
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -g CNI-HOSTPORT-DNAT
COMMIT
`
	jumps, chains := residueRules(save)
	wantJumps := map[string][][]string{
		"filter": {{"-D", "INPUT", "-j", "KUBE-FIREWALL"}, {"-D", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-FIREWALL"}},
		"nat":    {{"-D", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-g", "CNI-HOSTPORT-DNAT"}},
	}
	if !reflect.DeepEqual(jumps, wantJumps) {
		t.Errorf("jumps %q\nwant %q", jumps, wantJumps)
	}
	wantChains := map[string][]string{"filter": {"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"}, "nat": {"CNI-HOSTPORT-DNAT"}}
	if !reflect.DeepEqual(chains, wantChains) {
		t.Errorf("chains %v, want %v (MY-CHAIN is not the node's)", chains, wantChains)
	}
}

func TestMounts(t *testing.T) {
	mi := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
100 22 0:50 / /var/lib/nodemend-node/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access-x rw - tmpfs tmpfs rw
101 22 0:51 / /run/nodemend-node/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw - tmpfs shm rw
102 22 0:52 / /var/lib/nodemend-node-other rw - tmpfs tmpfs rw
103 22 0:53 / /var/lib/nodemend-node/with\040space rw - tmpfs tmpfs rw
`
	got := mountsUnder(mi, "/var/lib/nodemend-node", "/run/nodemend-node")
	want := []string{
		"/var/lib/nodemend-node/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access-x",
		"/run/nodemend-node/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm",
		"/var/lib/nodemend-node/with space",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mounts %q\nwant %q (deepest first; a sibling with the same prefix is not under)", got, want)
	}
	if rootIsPrivate(mi) {
		t.Error("a shared root read as private")
	}
	if !rootIsPrivate("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n") {
		t.Error("a private root read as shared")
	}
	norm := normalizeMounts(mi, "/var/lib/nodemend-node/kubelet")
	if len(norm) != 4 || norm[0] != "/ ext4 /dev/vda shared" {
		t.Errorf("normalized %q", norm)
	}
}

// Start makes / rshared, which turns every mount below it shared; Stop
// makes them all private again and then shares the ones that were shared
// before: a /run/netns that `ip netns add` had made shared stays shared
// (the CI failure of 2026-12-05: "mounts: + /run/netns private, -
// /run/netns shared"), and a covered /dev/pts, which no change by path
// reaches, goes back to private with the rest.
func TestPropagationRestore(t *testing.T) {
	before := mountPropagation(`26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 23 0:23 / /dev/pts rw,relatime - devpts devpts rw
28 25 0:25 / /dev/pts rw,relatime - devpts devpts rw
44 26 254:0 /run/netns /run/netns rw,relatime shared:5 - ext4 /dev/vda rw
45 26 0:60 / /mnt/slave rw master:7 - tmpfs tmpfs rw
46 26 0:61 / /mnt/private rw - tmpfs tmpfs rw
47 26 0:62 / /mnt/no\040bind rw unbindable - tmpfs tmpfs rw
`)
	if before["/run/netns"] != "shared" || before["/mnt/slave"] != "master" || before["/"] != "private" || before["/mnt/no bind"] != "unbindable" {
		t.Fatalf("propagation read as %v", before)
	}
	changes, lost := propagationRestore(before)
	want := []propagationChange{{"/mnt/no bind", "unbindable"}, {"/run/netns", "shared"}}
	if !reflect.DeepEqual(changes, want) {
		t.Errorf("changes %v\nwant %v (only what was shared or unbindable before is changed after rprivate)", changes, want)
	}
	if !reflect.DeepEqual(lost, []string{"/mnt/slave"}) {
		t.Errorf("lost %v, want the slave mount reported", lost)
	}
}

func TestParseStartTicks(t *testing.T) {
	stat := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 1523 0 12 0 41 17 0 0 20 0 1 0 98765 23138304 1480"
	if v, err := parseStartTicks(stat); err != nil || v != 98765 {
		t.Errorf("got %d, %v; want 98765", v, err)
	}
	if _, err := parseStartTicks(strings.Replace(stat, ") S ", ") Z ", 1)); err == nil {
		t.Error("a zombie counted as alive")
	}
}

func TestTraceDiff(t *testing.T) {
	a := Trace{Sections: map[string][]string{"links": {"eth0", "lo"}, "paths": {"/run/containerd"}}}
	b := Trace{Sections: map[string][]string{"links": {"eth0", "lo", "nmnode0"}}}
	got := Diff(a, b)
	want := []string{"links: + nmnode0", "paths: - /run/containerd"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff %q, want %q", got, want)
	}
	if d := Diff(a, a); len(d) != 0 {
		t.Errorf("a trace differs from itself: %q", d)
	}
}

// writeTar writes a tarball with the given files.
func writeTar(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindImages(t *testing.T) {
	dir := t.TempDir()
	oci := func(ref string) string {
		b, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "annotations": map[string]string{"io.containerd.image.name": ref}}}})
		return string(b)
	}
	writeTar(t, filepath.Join(dir, "agent.tar"), map[string]string{"index.json": oci("ghcr.io/nodemend/nodemend-agent:0.1.0"), "oci-layout": `{"imageLayoutVersion":"1.0.0"}`})
	writeTar(t, filepath.Join(dir, "controller.tar"), map[string]string{"manifest.json": `[{"RepoTags":["ghcr.io/nodemend/nodemend-controller:0.1.0"]}]`})
	writeTar(t, filepath.Join(dir, "pause.tar"), map[string]string{"index.json": oci("ghcr.io/nodemend/nodemend-pause:0.1.0")})
	writeTar(t, filepath.Join(dir, "kubectl-mend.tar"), map[string]string{"index.json": oci("ghcr.io/nodemend/kubectl-mend:0.1.0")})
	writeTar(t, filepath.Join(dir, "workload.tar"), map[string]string{"index.json": oci("ghcr.io/nodemend/nodemend-test-workload:0.1.0")})
	imgs, err := findImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if imgs.Agent != "ghcr.io/nodemend/nodemend-agent:0.1.0" || imgs.Controller != "ghcr.io/nodemend/nodemend-controller:0.1.0" ||
		imgs.Pause != "ghcr.io/nodemend/nodemend-pause:0.1.0" || imgs.Workload != "ghcr.io/nodemend/nodemend-test-workload:0.1.0" || len(imgs.Files) != 5 {
		t.Errorf("images %+v", imgs)
	}
	l := layout(t)
	v, err := l.chartValues(imgs)
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct {
			Registry   string `json:"registry"`
			PullPolicy string `json:"pullPolicy"`
		}
		Agent struct {
			Image       struct{ Repository, Tag string }
			Config      map[string]any `json:"config"`
			Remediation struct {
				Reboot           string   `json:"reboot"`
				RebootCommand    []string `json:"rebootCommand"`
				AcceleratorReset *bool    `json:"acceleratorReset"`
			}
			CloudMetadata struct{ Cloud, Endpoint string } `json:"cloudMetadata"`
		}
		Controller struct {
			Image struct{ Repository, Tag string }
		}
	}
	if err := yaml.UnmarshalStrict([]byte(v), &values); err != nil {
		t.Fatalf("values do not parse: %v\n%s", err, v)
	}
	if values.Image.Registry != "ghcr.io/nodemend" || values.Image.PullPolicy != "Never" || values.Agent.Image.Repository != "nodemend-agent" || values.Agent.Image.Tag != "0.1.0" || values.Controller.Image.Repository != "nodemend-controller" {
		t.Errorf("values %+v", values)
	}
	// The node is this machine: a reboot order touches the hook, never
	// reboots it, and GPUs are never reset.
	if r := values.Agent.Remediation; r.Reboot != "command" || strings.Join(r.RebootCommand, " ") != "/usr/bin/touch /host"+RebootHook ||
		r.AcceleratorReset == nil || *r.AcceleratorReset {
		t.Errorf("remediation values %+v: want the reboot hook and no accelerator reset", r)
	}
	// The agent's metadata service is AWS's mock on loopback, never the
	// real link-local address.
	if c := values.Agent.CloudMetadata; c.Cloud != "aws" || c.Endpoint != fmt.Sprintf("http://127.0.0.1:%d", l.Ports.Metadata) {
		t.Errorf("cloudMetadata values %+v: want the mock on 127.0.0.1:%d", c, l.Ports.Metadata)
	}

	if err := os.Remove(filepath.Join(dir, "pause.tar")); err != nil {
		t.Fatal(err)
	}
	if _, err := findImages(dir); err == nil || !strings.Contains(err.Error(), "no pause image") || !strings.Contains(err.Error(), "make images") {
		t.Errorf("a missing pause image: %v", err)
	}
	if _, err := findImages(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no images at all: %v", err)
	}
}

// The rendered configs parse as what they claim to be, and carry what the
// node needs on this kind of machine.
func TestRenderedConfigs(t *testing.T) {
	l := layout(t)
	for name, doc := range map[string]string{"kubelet": l.kubeletConfig(), "kube-proxy": l.kubeProxyConfig(), "admin": l.kubeconfig("admin")} {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	var kc map[string]any
	_ = yaml.Unmarshal([]byte(l.kubeletConfig()), &kc)
	for k, want := range map[string]any{"failCgroupV1": false, "cgroupDriver": "cgroupfs", "nodeStatusReportFrequency": "10s", "cgroupRoot": "/nodemend-node",
		"containerRuntimeEndpoint": "unix:///run/nodemend-node/containerd/containerd.sock", "readOnlyPort": float64(0)} {
		if !reflect.DeepEqual(kc[k], want) {
			t.Errorf("kubelet %s = %v, want %v", k, kc[k], want)
		}
	}
	var cni map[string]any
	if err := json.Unmarshal([]byte(l.cniConfig()), &cni); err != nil {
		t.Fatal(err)
	}
	br := cni["plugins"].([]any)[0].(map[string]any)
	if br["isGateway"] != false || br["ipMasq"] != false {
		t.Errorf("the bridge would route or masquerade off the machine: %v", br)
	}
	routes, _ := json.Marshal(br["ipam"].(map[string]any)["routes"])
	if strings.Contains(string(routes), "0.0.0.0/0") || !strings.Contains(string(routes), l.ServiceCIDR.String()) {
		t.Errorf("pod routes %s: want the service range and the node, no default", routes)
	}
	cc := l.containerdConfig("ghcr.io/nodemend/nodemend-pause:0.1.0")
	for _, want := range []string{`restrict_oom_score_adj = true`, `sandbox_image = "ghcr.io/nodemend/nodemend-pause:0.1.0"`, `SystemdCgroup = false`,
		`root = "/var/lib/nodemend-node/containerd"`, `address = "/run/nodemend-node/containerd/containerd.sock"`} {
		if !strings.Contains(cc, want) {
			t.Errorf("containerd config lacks %s", want)
		}
	}
	if !strings.Contains(strings.Join(l.apiServerArgs(), " "), "--enable-admission-plugins=NodeRestriction") {
		t.Error("the API server runs without NodeRestriction")
	}
}

// A fresh machine's first start makes the kernel create its tables: empty
// built-in chains with policy ACCEPT are as if absent, but a rule, a chain
// of its own or a DROP policy left behind is a trace.
func TestNormalizeIPTablesDropsEmptyTables(t *testing.T) {
	empty := "# Generated by iptables-save v1.8.9\n*filter\n:INPUT ACCEPT [12:3400]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [9:800]\nCOMMIT\n# Completed\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
	if got := normalizeIPTables(empty); len(got) != 0 {
		t.Errorf("empty tables kept: %q", got)
	}
	for name, save := range map[string]string{
		"rule":        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n",
		"own chain":   "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\nCOMMIT\n",
		"drop policy": "*filter\n:FORWARD DROP [0:0]\nCOMMIT\n",
	} {
		got := normalizeIPTables(save)
		if len(got) == 0 || got[0][0] != '*' || got[len(got)-1] != "COMMIT" {
			t.Errorf("%s: table dropped or cut: %q", name, got)
		}
	}
}
