package cli

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/pcaptest"
	"nodemend.dev/nodemend/pkg/diagnostics"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
)

// talk makes TCP connections to a listener of its own until stop is
// closed, and returns the listener's port.
func talk(t *testing.T, stop <-chan struct{}) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				buf := make([]byte, 5)
				_, _ = c.Read(buf)
				c.Close()
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestCaptureEndToEnd: `kubectl mend capture` on a node whose agent runs
// the real tcpdump on the loopback interface: progress while it runs, the
// capture downloaded through the API server's node proxy from the
// stand-in kubelet, a gzip pcap file that holds the filtered packets only,
// and the request cleaned up.
func TestCaptureEndToEnd(t *testing.T) {
	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	startAgent(t, node, h, func(o *diagnostics.Options) { o.Capturer = &pcap.Tcpdump{Commands: command.Exec{}} })
	stop := make(chan struct{})
	defer close(stop)
	port := talk(t, stop)
	dir := t.TempDir()
	out, err := run(t, "--kubeconfig", kubeconfig(t, cfg), "capture", node, "--interface", "lo",
		"--filter", "tcp port "+strconv.Itoa(port), "--duration", "4s", "-o", dir, "--progress", "plain")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{node + "  capturing", " packets, ", node + "  saved", "zcat "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output", want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, node+"-*.pcap.gz"))
	if len(files) != 1 {
		t.Fatalf("saved files %v", files)
	}
	f := pcaptest.ReadFile(t, files[0])
	if len(f.Packets) < 10 {
		t.Fatalf("%d packets captured", len(f.Packets))
	}
	// Loopback frames are Ethernet with zero addresses: IPv4 at 14, TCP at
	// 14 + the IP header's length.
	for i, p := range f.Packets {
		ihl := int(p[14]&0x0f) * 4
		sport, dport := binary.BigEndian.Uint16(p[14+ihl:]), binary.BigEndian.Uint16(p[16+ihl:])
		if int(sport) != port && int(dport) != port {
			t.Fatalf("packet %d (ports %d→%d) does not match the filter tcp port %d", i, sport, dport, port)
		}
	}
	list, err := nd.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Items {
		if o.Spec.NodeName == node {
			t.Errorf("nodediagnostic/%s left behind", o.Name)
		}
	}
}

// TestCaptureRefusals: hostile or impossible values are refused by the
// command before anything is created; what only the node can judge (an
// interface that is no network interface) is refused by the agent, and
// the request is cleaned up.
func TestCaptureRefusals(t *testing.T) {
	kc := kubeconfig(t, cfg)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"capture", "n1", "--interface", "eth0;reboot"}, "--interface: invalid interface name"},
		{[]string{"capture", "n1", "--interface", "-w/etc/x"}, "--interface: invalid interface name"},
		{[]string{"capture", "n1", "--interface", "abcdefghijklmnop"}, "--interface: invalid interface name"},
		{[]string{"capture", "n1", "--filter", "-w /etc/cron.d/x"}, "--filter: invalid filter"},
		{[]string{"capture", "n1", "--filter", "tcp\nport 1"}, "--filter: invalid filter"},
		{[]string{"capture", "n1", "--duration", "2h"}, "--duration 2h0m0s: between 1s and 1h"},
		{[]string{"capture", "../../etc"}, "is not a node name"},
		{[]string{"capture", "n1", "--upload-url", "http://x.example.com/c0"}, "--upload-url must be an https:// URL"},
		{[]string{"capture", "no-such-node"}, `node "no-such-node" not found`},
	} {
		before, _ := nd.List(context.Background(), metav1.ListOptions{})
		_, err := run(t, append([]string{"--kubeconfig", kc}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
		if after, _ := nd.List(context.Background(), metav1.ListOptions{}); len(after.Items) != len(before.Items) {
			t.Errorf("%q created a NodeDiagnostic", tc.args)
		}
	}

	h := diagtest.NewHost(t)
	node := kubeletNode(t, h)
	startAgent(t, node, h, func(o *diagnostics.Options) { o.Capturer = &pcap.Tcpdump{Commands: command.Exec{}} })
	_, err := run(t, "--kubeconfig", kc, "capture", node, "--interface", "dbus-system", "-o", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `the agent could not capture: "dbus-system" is not a network interface of this node`) {
		t.Fatalf("got %v", err)
	}
	list, _ := nd.List(context.Background(), metav1.ListOptions{})
	for _, o := range list.Items {
		if o.Spec.NodeName == node {
			t.Errorf("nodediagnostic/%s left behind after a failure", o.Name)
		}
	}
}

// TestLogsFlatManyNodes: several nodes at once, as kubectl ekslogs does:
// ./NODE-logs.tar.gz each, one live progress display, and a node without
// an agent failing alone: the others' bundles are saved and the exit
// status says one failed.
func TestLogsFlatManyNodes(t *testing.T) {
	var nodes []string
	for range 2 {
		h := diagtest.NewHost(t)
		node := kubeletNode(t, h)
		startAgent(t, node, h, nil)
		nodes = append(nodes, node)
	}
	lonely := kubeletNode(t, diagtest.NewHost(t))
	dir := t.TempDir()
	out, err := run(t, append([]string{"--kubeconfig", kubeconfig(t, cfg), "logs", "--flat", "--output-dir", dir, "--agent-timeout", "3s",
		"-t", "2m", "--progress", "live"}, append(nodes, lonely)...)...)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 nodes failed (the others' bundles are saved)") || !strings.Contains(err.Error(), lonely+": no nodemend-agent answered") {
		t.Fatalf("got %v", err)
	}
	for _, n := range nodes {
		untar(t, filepath.Join(dir, n+"-logs.tar.gz"))
	}
	if _, err := os.Stat(filepath.Join(dir, lonely+"-logs.tar.gz")); !os.IsNotExist(err) {
		t.Errorf("a bundle for the node without an agent: %v", err)
	}
	if !strings.Contains(out, "\x1b[J") || !strings.Contains(out, "3/3 nodes done (1 failed)") || !strings.Contains(out, "✖ "+lonely) {
		t.Errorf("no live display in %q", out)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".download-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}
