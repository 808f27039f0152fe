package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/imdsmock"
	"nodemend.dev/nodemend/internal/testsupport/netnstest"
	"nodemend.dev/nodemend/sim/simgpu"
)

// GPULabel on a node (from its NodePool's template) makes its fake host
// have that many NVIDIA GPUs: /dev/nvidiaN device nodes, so the NVIDIA
// monitor applies, and a stand-in nvidia-smi over their state (package
// simgpu), so ResetAccelerator orders are carried out.
const GPULabel = "sim.nodemend.dev/gpus"

// DefaultAgentConfig is the agents' config: kernel log and journal from
// the fake host's files; the monitors that read the real machine
// (netlink, mounts, the container runtime) are off, and so is the clock
// check (adjtimex reads the real kernel), because every simulated node
// shares the one machine the simulation runs on.
const DefaultAgentConfig = `sources:
  journal: {mode: file, file: /var/log/journal/sim.jsonl}
monitors:
  kernel: {checkInterval: 10s}
  containerRuntime: {enabled: false}
  networking: {enabled: false}
  storage: {enabled: false}
reasons:
  ClockUnsynchronized: {disabled: true}
`

// Host is a simulated node's machine: a directory as its root, the node's
// nodemend-agent, and a stand-in kubelet endpoint serving /logs/.
type Host struct {
	Node string
	// Root is the host's root directory; its dev/kmsg and
	// var/log/journal/sim.jsonl are the kernel log and journal.
	Root string
	// Started is when the agent was started.
	Started time.Time
	Agent   *Process

	// boot is when the host booted (proc/stat's btime): kernel records are
	// stamped relative to it; bootID is proc/sys/kernel/random/boot_id,
	// which the stand-in kubelet reports as status.nodeInfo.bootID.
	boot   time.Time
	bootID string

	mu         sync.Mutex
	kmsgSeq    uint64
	port       int
	kubelet    *http.Server
	reboots    int
	agentArgs  []string
	stopWatch  context.CancelFunc
	rebootMark string
}

// Reboots is how many times the host was rebooted by its agent.
func (h *Host) Reboots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reboots
}

// BootID is the host's current boot ID.
func (h *Host) BootID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bootID
}

// Kmsg appends a kernel log record (priority 3, err) to the host's kernel
// log and returns the time it was written.
func (h *Host) Kmsg(msg string) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kmsgSeq++
	now := time.Now()
	rec := hostroot.KmsgRecord(3, 1000+h.kmsgSeq, uint64(time.Since(h.boot).Microseconds()), msg) + "\n"
	return now, appendFile(filepath.Join(h.Root, "dev/kmsg"), rec)
}

// Journal appends a journal entry (journalctl -o json fields).
func (h *Host) Journal(fields map[string]string) error {
	line, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return appendFile(filepath.Join(h.Root, "var/log/journal/sim.jsonl"), string(line)+"\n")
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// nodeHosts gives every kwok node a Host while the node exists.
type nodeHosts struct {
	s     *Sim
	net   *netnstest.Host
	tls   *tls.Config
	mu    sync.Mutex
	hosts map[string]*Host
	gone  map[string]*Host
	port  int
	added chan struct{}
	// metadata is AWS's EC2 metadata mock the agents read as their cloud's
	// metadata service: never the real link-local address.
	metadata string
}

func startNodeHosts(ctx context.Context, s *Sim) (*nodeHosts, error) {
	if os.Geteuid() != 0 {
		return nil, errNotRoot
	}
	nh, err := netnstest.OpenHost()
	if err != nil {
		return nil, err
	}
	cert, err := selfSigned()
	if err != nil {
		_ = nh.Close()
		return nil, err
	}
	h := &nodeHosts{s: s, net: nh, tls: &tls.Config{Certificates: []tls.Certificate{cert}},
		hosts: map[string]*Host{}, gone: map[string]*Host{}, port: 10250, added: make(chan struct{}, 1)}
	if h.metadata, err = startMetadataMock(s); err != nil {
		_ = nh.Close()
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(s.Client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { h.sync(ctx, o) },
		UpdateFunc: func(_, o any) { h.sync(ctx, o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				h.remove(n.Name)
			}
		},
	})
	if err != nil {
		_ = nh.Close()
		return nil, err
	}
	factory.Start(ctx.Done())
	return h, nil
}

// sync creates the Host of a kwok node the first time it is seen.
func (h *nodeHosts) sync(ctx context.Context, o any) {
	n, ok := o.(*corev1.Node)
	if !ok || n.Annotations[KwokAnnotation] != "fake" || n.DeletionTimestamp != nil {
		return
	}
	h.mu.Lock()
	if host, ok := h.hosts[n.Name]; ok {
		h.mu.Unlock()
		h.ensureEndpoint(ctx, host, n)
		return
	}
	host := &Host{Node: n.Name, Root: filepath.Join(h.s.Dir, "nodes", n.Name), boot: time.Now().Add(-time.Hour), bootID: newBootID()}
	h.hosts[n.Name] = host
	h.port++
	port := h.port
	h.mu.Unlock()
	if err := h.setUp(ctx, host, n, port); err != nil {
		h.s.opts.Logf("node %s: setting up its simulated host: %v", n.Name, err)
		return
	}
	select {
	case h.added <- struct{}{}:
	default:
	}
}

func (h *nodeHosts) setUp(ctx context.Context, host *Host, n *corev1.Node, port int) error {
	gpus, _ := strconv.Atoi(n.Labels[GPULabel])
	if err := WriteHostRoot(host.Root, host.boot, gpus); err != nil {
		return err
	}
	if gpus > 0 {
		if err := simgpu.Install(host.Root, gpus, h.s.bins.nvidiaSMI); err != nil {
			return err
		}
	}
	if err := writeBoot(host.Root, host.boot, host.bootID); err != nil {
		return err
	}
	ln, err := h.net.ListenPort(port)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	// The kubelet serves the host's /var/log under /logs/; the API server's
	// node proxy reaches it there (kubectl mend logs).
	mux.Handle("/logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(filepath.Join(host.Root, "var/log")))))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	host.kubelet = &http.Server{Handler: mux, TLSConfig: h.tls, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = host.kubelet.ServeTLS(ln, "", "") }()

	host.mu.Lock()
	host.port = port
	host.mu.Unlock()
	h.ensureEndpoint(ctx, host, n)
	conf := filepath.Join(host.Root, "..", n.Name+".agent.yaml")
	agentConfig := h.s.opts.AgentConfig
	if agentConfig == "" {
		agentConfig = DefaultAgentConfig
	}
	if err := os.WriteFile(conf, []byte(agentConfig), 0o644); err != nil {
		return err
	}
	kubeconfig := h.s.Kubeconfig
	if h.s.opts.LeastPrivilege {
		if kubeconfig, err = h.s.agentKubeconfig(ctx, n.Name); err != nil {
			return err
		}
	}
	// The agent's reboot mechanism is a hook that leaves a mark; the
	// host's watcher reboots it (new boot ID, empty kernel log, the agent
	// restarted), as a machine would.
	host.rebootMark = filepath.Join(host.Root, "..", n.Name+".rebooted")
	hook := filepath.Join(host.Root, "..", n.Name+".reboot")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexec touch '"+host.rebootMark+"'\n"), 0o755); err != nil {
		return err
	}
	host.mu.Lock()
	host.agentArgs = []string{
		"--kubeconfig", kubeconfig, "--node-name", n.Name, "--host-root", host.Root,
		"--config", conf, "--metrics-bind-address", "", "--kube-api-qps", "20",
		"--reboot-mechanism", "command", "--reboot-command", hook,
		"--cloud-metadata", "aws", "--cloud-metadata-endpoint", h.metadata,
	}
	host.mu.Unlock()
	if err := h.startAgent(host); err != nil {
		return err
	}
	h.s.opts.Logf("node %s: nodemend-agent started, kubelet endpoint %s:%d", n.Name, h.net.IP, port)
	watch, stop := context.WithCancel(ctx)
	host.mu.Lock()
	host.stopWatch = stop
	host.mu.Unlock()
	go h.watchReboots(watch, host)
	return nil
}

func (h *nodeHosts) startAgent(host *Host) error {
	host.mu.Lock()
	args := host.agentArgs
	host.mu.Unlock()
	p, err := h.s.start("agent-"+host.Node, h.s.bins.agent, args, nil)
	if err != nil {
		return err
	}
	host.mu.Lock()
	host.Agent, host.Started = p, time.Now()
	host.mu.Unlock()
	return nil
}

// watchReboots reboots the host when its agent's reboot hook ran, until
// ctx ends (host.stopWatch, when the host is removed).
func (h *nodeHosts) watchReboots(ctx context.Context, host *Host) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := os.Stat(host.rebootMark); err != nil {
			return
		}
		if err := h.reboot(ctx, host); err != nil && ctx.Err() == nil {
			h.s.opts.Logf("node %s: rebooting its simulated host: %v", host.Node, err)
		}
	}, 100*time.Millisecond)
}

// reboot is what a reboot does to the node: its processes end (the agent,
// killed; those on its GPUs), the kernel starts afresh (new boot ID and boot
// time, an empty kernel log, GPUs initialised), the kubelet reports the new boot ID, and the agent's
// DaemonSet pod starts it again.
func (h *nodeHosts) reboot(ctx context.Context, host *Host) error {
	host.mu.Lock()
	agent := host.Agent
	host.mu.Unlock()
	if agent != nil {
		agent.Kill()
	}
	host.mu.Lock()
	host.boot, host.bootID, host.kmsgSeq = time.Now(), newBootID(), 0
	host.reboots++
	boot, id := host.boot, host.bootID
	host.mu.Unlock()
	if err := writeBoot(host.Root, boot, id); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(host.Root, "dev/kmsg"), nil, 0o644); err != nil {
		return err
	}
	if err := simgpu.Reboot(host.Root); err != nil {
		return err
	}
	if err := os.Remove(host.rebootMark); err != nil {
		return err
	}
	n, err := h.s.Client.CoreV1().Nodes().Get(ctx, host.Node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	h.ensureEndpoint(ctx, host, n)
	h.s.opts.Logf("node %s: rebooted by its agent (boot ID %s)", host.Node, id)
	return h.startAgent(host)
}

// newBootID is a random UUID, as the kernel makes one per boot.
func newBootID() string { return string(uuid.NewUUID()) }

// ensureEndpoint makes the node's status name its stand-in kubelet, as a
// kubelet registers its own address and port. It is re-done whenever the
// node lacks them: kwok's initialize stage, racing with the first write,
// may replace the addresses.
func (h *nodeHosts) ensureEndpoint(ctx context.Context, host *Host, n *corev1.Node) {
	host.mu.Lock()
	port, bootID := host.port, host.bootID
	host.mu.Unlock()
	if port == 0 {
		return // still being set up
	}
	ip := h.net.IP.String()
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(port) && slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}) &&
		n.Status.NodeInfo.BootID == bootID {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"addresses": []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeHostName, Address: n.Name},
		},
		"daemonEndpoints": corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		"nodeInfo":        map[string]any{"bootID": bootID},
	}})
	if _, err := h.s.Client.CoreV1().Nodes().PatchStatus(ctx, n.Name, patch); err != nil && ctx.Err() == nil {
		h.s.opts.Logf("node %s: registering its kubelet endpoint: %v", n.Name, err)
	}
}

// remove stops a deleted node's agent and kubelet; its files stay.
func (h *nodeHosts) remove(name string) {
	h.mu.Lock()
	host, ok := h.hosts[name]
	delete(h.hosts, name)
	if ok {
		h.gone[name] = host
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	host.mu.Lock()
	agent, kubelet, stopWatch := host.Agent, host.kubelet, host.stopWatch
	host.mu.Unlock()
	if stopWatch != nil {
		stopWatch()
	}
	if agent != nil {
		agent.Stop(5 * time.Second)
	}
	if kubelet != nil {
		_ = kubelet.Close()
	}
}

func (h *nodeHosts) stop() {
	h.mu.Lock()
	names := make([]string, 0, len(h.hosts))
	for n := range h.hosts {
		names = append(names, n)
	}
	h.mu.Unlock()
	for _, n := range names {
		h.remove(n)
	}
	_ = h.net.Close()
}

// Host returns the simulated host of a node, waiting until its agent runs.
func (s *Sim) Host(ctx context.Context, node string) (*Host, error) {
	if s.hosts == nil {
		return nil, fmt.Errorf("the simulation runs no agents")
	}
	var host *Host
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		s.hosts.mu.Lock()
		h := s.hosts.hosts[node]
		s.hosts.mu.Unlock()
		if h == nil {
			return false, nil
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		host = h
		return h.Agent != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s has no simulated host: %w", node, err)
	}
	return host, nil
}

// WriteHostRoot lays out a healthy host: the kernel log and journal the
// agent follows, the /proc files the kernel monitor reads, some logs for a
// diagnostic bundle, and gpus NVIDIA device nodes.
func WriteHostRoot(root string, boot time.Time, gpus int) error {
	files := map[string]string{
		"dev/kmsg":                       "",
		"var/log/journal/sim.jsonl":      "",
		"proc/loadavg":                   "0.52 0.58 0.59 3/1234 56789\n",
		"proc/sys/kernel/pid_max":        "4194304\n",
		"proc/sys/kernel/threads-max":    "254288\n",
		"proc/sys/fs/file-nr":            "9184\t0\t9223372036854775807\n",
		"proc/uptime":                    "3600.00 7000.00\n",
		"proc/stat":                      procStat(boot),
		"proc/1/stat":                    "1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
		"etc/os-release":                 "NAME=\"nodemend simulated host\"\nID=sim\n",
		"var/log/messages":               "simulated host booted\n",
		"var/lib/nodemend/.keep":         "",
		"etc/kubernetes/kubelet.conf":    "apiVersion: v1\nkind: Config\nusers:\n- name: kubelet\n  user:\n    token: sim-secret-token-never-in-bundles\n",
		"var/log/pods/.keep":             "",
		"var/log/containers/.keep":       "",
		"var/log/nodemend-sim-host.info": "a directory standing in for a node's root filesystem\n",
	}
	for i := 0; i < gpus; i++ {
		files[fmt.Sprintf("dev/nvidia%d", i)] = ""
	}
	if gpus > 0 {
		files["dev/nvidiactl"] = ""
	}
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// procStat is the host's proc/stat: the kernel log's timestamps count from
// its btime.
func procStat(boot time.Time) string {
	return fmt.Sprintf("cpu  1 2 3 4 5 6 7 0 0 0\nbtime %d\n", boot.Unix())
}

// writeBoot records a boot in the host root: its time in proc/stat (which
// the kernel log's timestamps count from) and its ID.
func writeBoot(root string, boot time.Time, id string) error {
	if err := os.WriteFile(filepath.Join(root, "proc/stat"), []byte(procStat(boot)), 0o644); err != nil {
		return err
	}
	p := filepath.Join(root, "proc/sys/kernel/random/boot_id")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(id+"\n"), 0o644)
}

// selfSigned is the stand-in kubelets' serving certificate (the API server
// does not verify kubelet certificates unless told a CA).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodemend-sim-kubelet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(10, 254, 0, 0)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// startMetadataMock runs AWS's EC2 metadata mock (hack/metadata-mock.sh) on
// loopback for the agents, IMDSv2 only, its scheduled event and spot notice
// held back for a day: bundles get an instance's metadata, and no agent
// warns of an event a scenario did not ask for.
func startMetadataMock(s *Sim) (string, error) {
	bin, err := imdsmock.Binary()
	if err != nil {
		return "", err
	}
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	p := strconv.Itoa(port)
	if _, err := s.start("ec2-metadata-mock", bin, []string{"--hostname", "127.0.0.1", "--port", p, "--imdsv2", "--mock-delay-sec", "86400"}, nil); err != nil {
		return "", err
	}
	return "http://127.0.0.1:" + p, nil
}
