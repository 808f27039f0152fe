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
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
	"nodemend.dev/nodemend/pkg/diagnostics/command"
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
