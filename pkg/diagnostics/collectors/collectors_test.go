package collectors_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/cloudmeta"
	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/imdsmock"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
)

func env(h *diagtest.Host) *collectors.Env {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nodemend_agent_detections_total", Help: "x"})
	reg.MustRegister(c)
	c.Inc()
	now := time.Date(2024, 6, 12, 10, 30, 0, 0, time.UTC)
	return &collectors.Env{
		HostRoot: h.Root.Dir, NodeName: "ip-10-0-1-23", Commands: h.Script, Netlink: h.Netlink,
		Since: now.Add(-24 * time.Hour), Now: now, Gatherer: reg,
		EffectiveConfig: func() any { return h.EffectiveConfig },
	}
}

func bundleOf(t *testing.T, e *collectors.Env, cats ...v1alpha1.LogCategory) (map[string]string, []bundle.CollectorResult) {
	t.Helper()
	var buf bytes.Buffer
	b := bundle.New(&buf, bundle.Options{Root: "b"})
	res, _, err := collect.Run(context.Background(), collectors.For(e, cats), b, collect.Options{SpoolDir: filepath.Join(t.TempDir(), "spool")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(bundle.Manifest{Collectors: res}); err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, "b/")] = string(data)
	}
	return files, res
}

// TestFakeHostBundle runs every collector on the fake host: every category
// has files, no collector fails (the ones that do not apply say why), and no
// planted secret is in the bundle.
func TestFakeHostBundle(t *testing.T) {
	h := diagtest.NewHost(t)
	files, res := bundleOf(t, env(h))
	expectSkipped := map[string]bool{
		"base/node": true, "nodemend/findings": true, // no API client in this test
		"accelerators/amd-smi": true, "accelerators/neuron-ls": true, "accelerators/neuron-devices": true,
		"accelerators/gpu-diagnostic": true, // only with a GPU diagnostic in the same NodeDiagnostic
		"runtime/cri-images":          true, // the fake runtime has no image service
		"system/journal-files":        true, "system/pressure": false,
		// Cloud metadata, the CNIs' own logs, nodeadm: TestFakeEKSHostBundle.
		"base/cloud-metadata": true, "system/pod-logs": true, "system/journal-nodeadm-config": true, "system/journal-nodeadm-run": true,
		"system/journal-sandbox-image": true, "system/journal-configure-multicard-interfaces": true, "system/nodeadm-config": true,
		"networking/vpc-cni-logs": true, "networking/vpc-cni-ipamd": true, "networking/cilium-logs": true, "networking/calico-logs": true,
	}
	for _, r := range res {
		if r.Error != "" {
			t.Errorf("collector %s failed: %s", r.Name, r.Error)
		}
		if r.Skipped != "" && !expectSkipped[r.Name] {
			t.Errorf("collector %s skipped: %s", r.Name, r.Skipped)
		}
	}
	want := []string{
		"base/summary.txt", "base/etc/os-release", "base/proc/version", "base/sys/class/dmi/id/product_name",
		"kernel/dmesg.txt", "kernel/var/log/kern.log", "kernel/proc/modules",
		"system/journal/kubelet.log", "system/journal/containerd.log", "system/journal/warnings.log", "system/var/log/syslog",
		"system/processes.txt", "system/environ/kubelet-1034.env", "system/sysctl.txt", "system/proc/pressure/cpu", "system/cgroup-throttling.txt",
		"runtime/cri/version.json", "runtime/cri/pods.json", "runtime/cri/containers.json", "runtime/etc/containerd/config.toml", "runtime/var/lib/kubelet/kubeconfig",
		"runtime/kubelet/config/config.yaml", "runtime/kubelet/kubeconfig/kubeconfig", "system/daemons/kubelet-1034-fd1.log",
		"networking/links.txt", "networking/addresses.txt", "networking/routes.txt", "networking/rules.txt", "networking/neighbours.txt",
		"networking/iptables-save.txt", "networking/nft-ruleset.txt", "networking/conntrack.txt", "networking/etc/resolv.conf", "networking/ss.txt",
		"storage/proc/1/mountinfo", "storage/filesystems.txt", "storage/df.txt", "storage/block-devices.txt", "storage/proc/diskstats",
		"accelerators/nvidia/nvidia-smi-q.txt", "accelerators/proc/driver/nvidia/version", "accelerators/sys/class/drm/card1/device/gpu_busy_percent",
		"nodemend/effective-config.yaml", "nodemend/metrics.txt",
	}
	for _, f := range want {
		if _, ok := files[f]; !ok {
			t.Errorf("bundle lacks %s", f)
		}
	}
	for name, content := range files {
		for _, s := range h.Secrets {
			if strings.Contains(content, s) {
				t.Errorf("planted secret %q survived in %s", s, name)
			}
		}
	}
	// Spot checks of content.
	for file, sub := range map[string]string{
		"kernel/dmesg.txt":                    "err: NVRM: Xid (PCI:0000:3b:00): 79",
		"system/processes.txt":                "--token=[REDACTED]",
		"system/environ/kubelet-1034.env":     "AWS_REGION=us-east-1",
		"system/cgroup-throttling.txt":        "kubepods-burstable-pod1234.slice",
		"runtime/cri/pods.json":               "coredns-5d78c9869d-abcde",
		"networking/routes.txt":               "default via 10.0.1.1 dev eth0 table main",
		"networking/rules.txt":                "1536:\tfrom 10.0.1.77/32 lookup 2",
		"storage/filesystems.txt":             "/var/lib/kubelet",
		"base/summary.txt":                    "Debian GNU/Linux 12 (bookworm)",
		"nodemend/metrics.txt":                "nodemend_agent_detections_total 1",
		"runtime/kubelet/config/config.yaml":  "maxPods: 58",
		"system/daemons/kubelet-1034-fd1.log": "Kubelet version",
	} {
		if !strings.Contains(files[file], sub) {
			t.Errorf("%s lacks %q:\n%s", file, sub, files[file])
		}
	}
}

func TestCategoriesSelectCollectors(t *testing.T) {
	h := diagtest.NewHost(t)
	for _, c := range collectors.For(env(h), []v1alpha1.LogCategory{"kernel", "storage"}) {
		if c.Category != "kernel" && c.Category != "storage" {
			t.Errorf("collector %s of category %s selected", c.Name, c.Category)
		}
	}
	if n := len(collectors.For(env(h), nil)); n < 40 {
		t.Errorf("all categories: only %d collectors", n)
	}
}

// TestRealCommands runs real tools of this machine through command.Exec:
// df and journalctl (on an empty host root: no journal files).
func TestRealCommands(t *testing.T) {
	h := diagtest.NewHost(t)
	e := env(h)
	e.Commands = command.Exec{}
	files, res := bundleOf(t, e, v1alpha1.CategoryStorage)
	for _, r := range res {
		if r.Name == "storage/df" && (r.Error != "" || r.Skipped != "") {
			t.Fatalf("real df: %+v", r)
		}
	}
	if !strings.Contains(files["storage/df.txt"], "Mounted on") {
		t.Fatalf("real df output: %q", files["storage/df.txt"])
	}
	// A real command that fails reports its exit status and stderr.
	var out bytes.Buffer
	err := command.Exec{}.Run(context.Background(), "df", []string{"/nonexistent-nodemend"}, &out)
	if err == nil || !strings.Contains(err.Error(), "exit status") || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("failing df: %v", err)
	}
	// And one killed by its context.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := (command.Exec{}).Run(ctx, "sleep", []string{"10"}, &out); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("sleep past its deadline: %v after %v", err, time.Since(start))
	}
}

// TestRealNetlink reads this machine's network namespace through netlink
// (read-only): there is a loopback with 127.0.0.1.
func TestRealNetlink(t *testing.T) {
	h := diagtest.NewHost(t)
	e := env(h)
	nl, err := collectors.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	e.Netlink = nl
	files, res := bundleOf(t, e, v1alpha1.CategoryNetworking)
	for _, r := range res {
		if r.Name == "networking/netlink" && r.Error != "" {
			t.Fatalf("real netlink: %s", r.Error)
		}
	}
	if !strings.Contains(files["networking/links.txt"], " lo ") || !strings.Contains(files["networking/addresses.txt"], "127.0.0.1/8") ||
		!strings.Contains(files["networking/routes.txt"], "table local") {
		t.Fatalf("real netlink state:\n%s\n%s\n%s", files["networking/links.txt"], files["networking/addresses.txt"], files["networking/routes.txt"])
	}
}

// TestHungCommand: a tool that hangs (and ignores its context) costs its
// collector's timeout, not the bundle.
func TestHungCommand(t *testing.T) {
	h := diagtest.NewHost(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	h.Script.Set("iptables-save -c", command.Result{Hang: hang})
	var buf bytes.Buffer
	b := bundle.New(&buf, bundle.Options{Root: "b"})
	start := time.Now()
	res, _, err := collect.Run(context.Background(), collectors.For(env(h), []v1alpha1.LogCategory{"networking"}), b,
		collect.Options{SpoolDir: filepath.Join(t.TempDir(), "s"), Timeout: 200 * time.Millisecond, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("bundle took %v with one hung command", took)
	}
	for _, r := range res {
		switch {
		case r.Name == "networking/iptables":
			if !r.TimedOut {
				t.Errorf("hung iptables-save: %+v", r)
			}
		case r.Error != "":
			t.Errorf("%s failed too: %s", r.Name, r.Error)
		}
	}
}

// TestTailWindowContext: a log whose tail window starts inside a private
// key block and inside a YAML block under a secret key (their first lines
// before the window): both are masked, because the redactor sees the bytes
// before the window.
func TestTailWindowContext(t *testing.T) {
	h := diagtest.NewHost(t)
	pad := strings.Repeat("Jun 12 10:00:00 ip-10-0-1-23 kubelet[1034]: I0612 ordinary line\n", 50)
	// Lower-case body lines: nothing but the block says they are secret.
	window := "secretbodylineone\nsecretbodylinetwo\n-----END PRIVATE KEY-----\n"
	yamlWindow := "  hunterhunterthree\nafter\n"
	content := pad + "-----BEGIN PRIVATE KEY-----\nsecretbodylinezero\n" + window + "password: |\n" + yamlWindow
	h.Root.WriteFile("var/log/cloud-init-output.log", content)
	h.Root.WriteFile("var/log/syslog", pad+"password: |\n"+yamlWindow)
	for _, tc := range []struct{ file, window string }{
		{"var/log/cloud-init-output.log", window + "password: |\n" + yamlWindow},
		{"var/log/syslog", yamlWindow},
	} {
		e := env(h)
		e.LogTailBytes = int64(len(tc.window)) + 1 // the window starts on a line of the block
		files, _ := bundleOf(t, e, v1alpha1.CategorySystem)
		got := files["system/"+tc.file]
		for _, s := range []string{"secretbodyline", "hunterhunterthree"} {
			if strings.Contains(got, s) {
				t.Errorf("%s: %q survived the cut window:\n%s", tc.file, s, got)
			}
		}
		if !strings.HasSuffix(got, "after\n") || strings.Contains(got, "ordinary line") {
			t.Errorf("%s: window content:\n%s", tc.file, got)
		}
	}
}

// TestJournalWindowContext: the journal's window starts inside a key block;
// the entries before it (asked from journalctl with --until) tell the
// redactor.
func TestJournalWindowContext(t *testing.T) {
	h := diagtest.NewHost(t)
	pre := "2024-06-12T10:00:01.%06d+0000 ip-10-0-1-23 kubelet[1034]: "
	lines := []string{"-----BEGIN RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEAjournalwindow", "shortlast1", "-----END RSA PRIVATE KEY-----"}
	for i := range lines {
		lines[i] = fmt.Sprintf(pre, i) + lines[i]
	}
	h.Script.Set("journalctl * --unit=kubelet.service", command.Result{Stdout: strings.Join(lines[1:], "\n") + "\n"})
	h.Script.Set("journalctl * --until=* --unit=kubelet.service", command.Result{Stdout: strings.Join(lines[:2], "\n") + "\n"})
	files, _ := bundleOf(t, env(h), v1alpha1.CategorySystem)
	got := files["system/journal/kubelet.log"]
	if strings.Contains(got, "journalwindow") || strings.Contains(got, "shortlast1") || !strings.Contains(got, "-----END RSA PRIVATE KEY-----") {
		t.Errorf("journal window:\n%s", got)
	}
	var ctxCall bool
	for _, c := range h.Script.Calls() {
		if strings.Contains(c, "--until=@1718186402") && strings.Contains(c, "--lines=200") {
			ctxCall = true
		}
	}
	if !ctxCall {
		t.Errorf("no context query in %q", h.Script.Calls())
	}
}

// eksBundleFiles is, for every category of the EKS node monitoring agent's
// bundle (aws/eks-node-monitoring-agent docs/NodeDiagnostics), the files of
// that category that the fake EKS host has, and where nodemend's bundle
// keeps them (docs/engines.md, "Switching from the EKS agent").
func eksBundleFiles() map[string]string {
	return map[string]string{
		"var_log/aws-routed-eni/ipamd.log":                "networking/var/log/aws-routed-eni/ipamd.log",
		"var_log/aws-routed-eni/plugin.log":               "networking/var/log/aws-routed-eni/plugin.log",
		"var_log/aws-routed-eni/network-policy-agent.log": "networking/var/log/aws-routed-eni/network-policy-agent.log",
		"var_log/aws-routed-eni/ebpf-sdk.log":             "networking/var/log/aws-routed-eni/ebpf-sdk.log",
		"var_log/aws-routed-eni/egress-v6-plugin.log":     "networking/var/log/aws-routed-eni/egress-v6-plugin.log",
		"var_log/cloud-init.log":                          "system/var/log/cloud-init.log",
		"var_log/cloud-init-output.log":                   "system/var/log/cloud-init-output.log",
		"var_log/user-data.log":                           "system/var/log/user-data.log",
		"var_log/cron":                                    "system/var/log/cron",
		"var_log/kube-proxy.log":                          "system/var/log/kube-proxy.log",
		"var_log/syslog":                                  "system/var/log/syslog",
		"var_log/kube-system_aws-node-…/aws-node/0.log":   "system/var/log/pods/kube-system_aws-node-z8qk6_892ff6b4-95ee-409c-87ea-c97686b644fe/aws-node/0.log",
		"var_log/kube-system_coredns-…/coredns/0.log":     "system/var/log/pods/kube-system_coredns-5d78c9869d-abcde_00aae29f-98c1-4e52-a24f-4a32cd5da5da/coredns/0.log",
		"var_log/kube-system_kube-proxy-…/0.log":          "system/var/log/pods/kube-system_kube-proxy-7xkq2_11bbe29f-98c1-4e52-a24f-4a32cd5da5db/kube-proxy/0.log",
		"var_log/kube-system_ebs-csi-…/0.log":             "system/var/log/pods/kube-system_ebs-csi-node-4mz8p_22cce29f-98c1-4e52-a24f-4a32cd5da5dc/ebs-plugin/0.log",
		"var_log/kube-system_eks-pod-identity-agent-…":    "system/var/log/pods/kube-system_eks-pod-identity-agent-9q8w7_33dde29f-98c1-4e52-a24f-4a32cd5da5dd/eks-pod-identity-agent/0.log",
		"ipamd/enis.json":                                 "networking/vpc-cni/ipamd/enis.json",
		"ipamd/pods.json":                                 "networking/vpc-cni/ipamd/pods.json",
		"ipamd/networkutils-env-settings.json":            "networking/vpc-cni/ipamd/networkutils-env-settings.json",
		"ipamd/ipamd-env-settings.json":                   "networking/vpc-cni/ipamd/ipamd-env-settings.json",
		"ipamd/eni-configs.json":                          "networking/vpc-cni/ipamd/eni-configs.json",
		"ipamd/metrics.json":                              "networking/vpc-cni/ipamd/metrics.txt",
		"ipamd/ipam.json":                                 "networking/var/run/aws-node/ipam.json",
		"cni/10-aws.conflist":                             "networking/etc/cni/net.d/10-aws.conflist",
		"nodeadm/nodeadm-config.log":                      "system/journal/nodeadm-config.log",
		"nodeadm/nodeadm-run.log":                         "system/journal/nodeadm-run.log",
		"sandbox-image/sandbox-image-log.txt":             "system/journal/sandbox-image.log",
		"networking/configure-multicard-interfaces.txt":   "system/journal/configure-multicard-interfaces.log",
		"system/instance-id.txt":                          "base/cloud/aws/meta-data/instance-id",
		"system/region.txt":                               "base/cloud/aws/meta-data/placement/region",
		"system/availability-zone.txt":                    "base/cloud/aws/meta-data/placement/availability-zone",
		"kernel/dmesg.current":                            "kernel/dmesg.txt",
		"kubelet/kubelet.log":                             "system/journal/kubelet.log",
		"kubelet/config.json":                             "runtime/etc/kubernetes/kubelet/config.json",
		"kubelet/config.json.d/":                          "system/etc/kubernetes/kubelet/config.json.d/00-nodeadm.conf",
		"kubelet/kubeconfig.yaml":                         "runtime/var/lib/kubelet/kubeconfig",
		"containerd/containerd-log.txt":                   "system/journal/containerd.log",
		"containerd/containerd-config.txt":                "runtime/etc/containerd/config.toml",
		"containerd/containerd-containers.txt":            "runtime/cri/containers.json",
		"networking/iptables-save.txt":                    "networking/iptables-save.txt",
		"networking/iproute.txt":                          "networking/routes.txt",
		"networking/iprule.txt":                           "networking/rules.txt",
		"networking/resolv.conf":                          "networking/etc/resolv.conf",
		"networking/conntrack.txt":                        "networking/conntrack.txt",
		"storage/mounts.txt":                              "storage/proc/1/mountinfo",
		"storage/inodes.txt":                              "storage/df-inodes.txt",
		"sysctls/sysctl_all.txt":                          "system/sysctl.txt",
		"system/ps.txt":                                   "system/processes.txt",
		"system/cpu_throttling.txt":                       "system/cgroup-throttling.txt",
	}
}

// TestFakeEKSHostBundle: on a fake EKS host with the VPC CNI, nodeadm and
// AWS's metadata mock behind IMDSv2, the bundle holds every category of the
// EKS agent's bundle, Cilium's and Calico's CNI logs, the instance's
// metadata and its scheduled event, and none of the planted secrets.
func TestFakeEKSHostBundle(t *testing.T) {
	h := diagtest.NewHost(t)
	eks := h.AddEKS(t)
	mock, err := imdsmock.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mock.Stop)
	cloud, err := cloudmeta.New(cloudmeta.AWS, mock.Endpoint, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := env(h)
	e.Cloud, e.IPAMDIntrospection, e.IPAMDMetrics = cloud, eks.IPAMDIntrospection, eks.IPAMDMetrics
	files, res := bundleOf(t, e)
	for _, r := range res {
		if r.Error != "" {
			t.Errorf("collector %s failed: %s", r.Name, r.Error)
		}
	}
	for eksPath, ours := range eksBundleFiles() {
		if _, ok := files[ours]; !ok {
			t.Errorf("the EKS agent's %s: bundle lacks %s", eksPath, ours)
		}
	}
	for _, f := range []string{"networking/var/run/cilium/cilium-cni.log", "networking/var/log/calico/cni/cni.log",
		"networking/var/log/calico/felix/current", "system/etc/eks/nodeadm.d/00-nodeconfig.yaml",
		"base/cloud/aws/dynamic/instance-identity/document", "base/cloud/instance.txt",
		"base/cloud/aws/meta-data/network/interfaces/macs/0e:49:61:0f:c3:11/subnet-id"} {
		if _, ok := files[f]; !ok {
			t.Errorf("bundle lacks %s", f)
		}
	}
	if _, ok := files["system/var/log/pods/default_web-0_44eee29f-98c1-4e52-a24f-4a32cd5da5de/web/0.log"]; ok {
		t.Error("a workload pod's log is in the bundle")
	}
	for _, want := range []string{"instance-id:       i-1234567890abcdef0", "instance-type:     m4.xlarge", "scheduled event:   system-reboot"} {
		if !strings.Contains(files["base/cloud/instance.txt"], want) {
			t.Errorf("instance.txt lacks %q:\n%s", want, files["base/cloud/instance.txt"])
		}
	}
	for name, content := range files {
		for _, s := range h.Secrets {
			if strings.Contains(content, s) {
				t.Errorf("planted secret %q survived in %s", s, name)
			}
		}
		if strings.Contains(name, "iam") || strings.Contains(name, "user-data") && strings.HasPrefix(name, "base/cloud") {
			t.Errorf("%s: credentials or user data of the metadata service in the bundle", name)
		}
	}
}

// TestNoCloudNoMetadata: a node whose metadata endpoint does not answer
// (no cloud) gets no metadata files, only the skip note.
func TestNoCloudNoMetadata(t *testing.T) {
	h := diagtest.NewHost(t)
	cloud, err := cloudmeta.New(cloudmeta.AWS, "http://127.0.0.1:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := env(h)
	e.Cloud = cloud
	files, res := bundleOf(t, e, v1alpha1.CategoryBase)
	for _, r := range res {
		if r.Name == "base/cloud-metadata" && (!strings.Contains(r.Skipped, "not on a cloud that answers") || r.Error != "") {
			t.Errorf("cloud-metadata: skipped %q, error %q", r.Skipped, r.Error)
		}
	}
	for f := range files {
		if strings.HasPrefix(f, "base/cloud/") {
			t.Errorf("%s in the bundle of a node on no cloud", f)
		}
	}
}
