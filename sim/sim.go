// Package sim is nodemend's local simulation: a real control plane
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager at the
// pinned Kubernetes version), kwok as the kubelets of simulated nodes,
// Karpenter with its kwok cloud provider launching and terminating them,
// nodemend-controller replicas under leader election, and a nodemend-agent
// with its own fake host root and stand-in kubelet endpoint per node.
//
// Everything that Kubernetes or Karpenter can do is done by them —
// scheduling, eviction, PodDisruptionBudgets, node deletion and replacement.
// Only the hosts are fake: a node's kernel log and journal are files that a
// demo or test writes to.
//
// make demo, make e2e and make bench-fleet run on it.
package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

// Namespace is where nodemend's controller runs (leader election Lease,
// pause ConfigMap).
const Namespace = "nodemend-system"

// Options choose what runs.
type Options struct {
	// Dir holds the run's state: logs/ (one file per process), nodes/ (a
	// host root per simulated node) and admin.kubeconfig. Emptied at Start.
	Dir string
	// Karpenter runs Karpenter with its kwok cloud provider (and kwok).
	Karpenter bool
	// Zones, when set, are the only zones Karpenter's kwok provider offers
	// the simulation's instance types in (c-1x- and c-4x-amd64-linux, on demand),
	// instead of kwok's four test-zone-a..d: enough for each NodePool to
	// have a zone of its own (NodePoolInZone). The controller's zone gate
	// counts every pool's nodes of a zone, so tests that share zones change
	// each other's counts.
	Zones []string
	// KarpenterNodeRepair turns on Karpenter's own node repair (its
	// NodeRepair feature gate), for comparing it with nodemend's.
	KarpenterNodeRepair bool
	// Kwok runs kwok without Karpenter: nodes created with the kwok
	// annotation become Ready (the fleet benchmark creates its own).
	Kwok bool
	// KwokLeaseSeconds is the simulated kubelets' Lease duration (default
	// 40, as a kubelet's); kwok renews a Lease at a quarter of it.
	KwokLeaseSeconds int
	// NoKubeComponents skips kube-scheduler and kube-controller-manager,
	// for runs that schedule no pods and want the CPU for something else.
	NoKubeComponents bool
	// Controllers is the number of nodemend-controller replicas (leader
	// election picks one); 0 runs none.
	Controllers int
	// ControllerArgs are extra nodemend-controller flags.
	ControllerArgs []string
	// Agents runs a nodemend-agent and a stand-in kubelet endpoint for every
	// node kwok manages (needs root: the endpoints live in a network
	// namespace, as the API server refuses to proxy to loopback addresses).
	Agents bool
	// AgentConfig is every agent's config file (YAML); empty: DefaultAgentConfig.
	AgentConfig string
	// LeastPrivilege runs agents and controllers with the identities the
	// shipped manifests give them instead of an admin's: RBAC, admission
	// policies and the agent DaemonSet from deploy/manifests/nodemend.yaml,
	// each agent with a token bound to the DaemonSet's pod on its node, the
	// controllers with their ServiceAccount's token. Needs kube-scheduler
	// and kube-controller-manager (the DaemonSet's pods).
	LeastPrivilege bool
	// Logf reports progress; nil is quiet.
	Logf func(format string, args ...any)
	// BinDir holds nodemend's own binaries as `make build` lays them out
	// (nodemend-agent, nodemend-controller, sim/fake-nvidia-smi); empty is
	// the repository's bin/. Relative to the repository's root.
	BinDir string
}

// Sim is a running simulation.
type Sim struct {
	Dir        string
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface

	opts        Options
	bins        binaries
	env         *testenv.Env
	procs       processes
	controllers []*Process
	karpenter   *Process
	// karpenterMetricsPort serves Karpenter's metrics on 127.0.0.1.
	karpenterMetricsPort int
	hosts                *nodeHosts
	cancel               context.CancelFunc
	// controllerKubeconfig is the controllers' identity (LeastPrivilege).
	controllerKubeconfig string
}

// Start builds what is missing (first run only) and starts everything
// Options asks for. On error, what was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Sim, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"logs", "nodes"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	bins, err := findBinaries(opts)
	if err != nil {
		return nil, err
	}
	s := &Sim{Dir: dir, opts: opts, bins: bins}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	t0 := time.Now()
	crds := []string{testenv.NodemendCRDs()}
	if opts.Karpenter {
		crds = append(crds, filepath.Join(bins.sim, "crds"))
	}
	s.env, err = testenv.Start(testenv.Options{CRDDirectoryPaths: crds, APIServerFlags: map[string]string{
		// As on most clouds: the node proxy dials the node's InternalIP (a
		// simulated node's hostname resolves nowhere).
		"kubelet-preferred-address-types": "InternalIP,Hostname",
	}})
	if err != nil {
		return nil, err
	}
	s.Config = s.env.Config
	s.Client = s.env.Client
	if s.Dynamic, err = dynamic.NewForConfig(s.Config); err != nil {
		return nil, err
	}
	kc, err := s.env.AdminKubeconfig("nodemend-sim-admin")
	if err != nil {
		return nil, err
	}
	s.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(s.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	opts.Logf("etcd and kube-apiserver ready in %v (kubeconfig %s)", time.Since(t0).Round(time.Millisecond), s.Kubeconfig)

	if !opts.NoKubeComponents {
		if err := s.startKubeComponents(); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Karpenter:
		if err := s.startKarpenter(ctx); err != nil {
			return nil, err
		}
	case opts.Kwok:
		if err := s.StartKwok(); err != nil {
			return nil, err
		}
	}
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if opts.LeastPrivilege {
		if opts.NoKubeComponents {
			return nil, fmt.Errorf("LeastPrivilege needs the scheduler and controller-manager for the agent DaemonSet's pods")
		}
		if err := s.installIdentities(ctx); err != nil {
			return nil, err
		}
		opts.Logf("RBAC, admission policies and agent DaemonSet from deploy/manifests installed; agents and controllers use their own identities")
	}
	for i := 0; i < opts.Controllers; i++ {
		if _, err := s.StartController(i); err != nil {
			return nil, err
		}
	}
	if opts.Agents {
		hctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		if s.hosts, err = startNodeHosts(hctx, s); err != nil {
			return nil, err
		}
	}
	// A component that cannot start exits within a moment; say which.
	time.Sleep(500 * time.Millisecond)
	if err := s.procs.exitedEarly(); err != nil {
		return nil, err
	}
	opts.Logf("simulation running (%v); logs in %s", time.Since(t0).Round(time.Millisecond), filepath.Join(dir, "logs"))
	return s, nil
}

// Stop ends every process the simulation started and removes the stand-in
// kubelets' network namespace. The state directory is kept for its logs.
func (s *Sim) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.hosts != nil {
		s.hosts.stop()
	}
	s.procs.stopAll(10 * time.Second)
	if s.env != nil {
		_ = s.env.Stop()
	}
}

// Healthy returns an error if a process of the simulation has died.
func (s *Sim) Healthy() error { return s.procs.exitedEarly() }

// LogDir is where every process writes.
func (s *Sim) LogDir() string { return filepath.Join(s.Dir, "logs") }

func (s *Sim) start(name, bin string, args, env []string) (*Process, error) {
	p, err := startProcess(s.LogDir(), name, bin, args, env)
	if err != nil {
		return nil, err
	}
	s.procs.add(p)
	return p, nil
}

// startKubeComponents runs kube-controller-manager (Deployments,
// ReplicaSets, the disruption controller that computes PDB status, pod GC,
// node lifecycle) and kube-scheduler.
func (s *Sim) startKubeComponents() error {
	kc := s.Kubeconfig
	if _, err := s.start("kube-controller-manager", filepath.Join(s.bins.kube, "kube-controller-manager"), []string{
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		// No node IPAM; the token controller needs a key the
		// simulation has no use for.
		"--controllers=*,-nodeipam,-serviceaccount-token",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--kube-api-qps=200", "--kube-api-burst=300",
	}, nil); err != nil {
		return err
	}
	_, err := s.start("kube-scheduler", filepath.Join(s.bins.kube, "kube-scheduler"), []string{
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--leader-elect=false", "--secure-port=0",
	}, nil)
	return err
}

// StartController starts nodemend-controller replica i.
func (s *Sim) StartController(i int) (*Process, error) {
	kubeconfig := s.Kubeconfig
	if s.controllerKubeconfig != "" {
		kubeconfig = s.controllerKubeconfig
	}
	args := append([]string{
		"--kubeconfig", kubeconfig, "--namespace", Namespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
	}, s.opts.ControllerArgs...)
	p, err := s.start(fmt.Sprintf("nodemend-controller-%d", i), s.bins.controller, args, nil)
	if err != nil {
		return nil, err
	}
	if i < len(s.controllers) {
		s.controllers[i] = p
	} else {
		s.controllers = append(s.controllers, p)
	}
	return p, nil
}

// Controller returns replica i.
func (s *Sim) Controller(i int) *Process { return s.controllers[i] }

// Leader waits until a running nodemend-controller replica holds the
// leader Lease and returns its index (from its log: the Lease's holder
// identity names a host, and every replica runs on this one).
func (s *Sim) Leader(ctx context.Context) (int, error) {
	leader := -1
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		for i, p := range s.controllers {
			if exited, _ := p.Exited(); exited {
				continue
			}
			if ok, err := p.Logged("Successfully acquired lease"); err == nil && ok {
				leader = i
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return -1, fmt.Errorf("no nodemend-controller replica became leader: %w", err)
	}
	return leader, nil
}

// RESTConfigFor returns a client config that identifies as name in the
// API server's logs and metrics.
func (s *Sim) RESTConfigFor(name string) *rest.Config {
	c := rest.CopyConfig(s.Config)
	c.UserAgent = name
	return c
}

// binaries are the files the simulation runs.
type binaries struct {
	kube       string // etcd, kube-apiserver, kube-scheduler, kube-controller-manager
	sim        string // kwok, karpenter-kwok, crds/, kwok-stages/
	agent      string
	controller string
	nvidiaSMI  string // the GPU hosts' stand-in nvidia-smi (package simgpu)
}

// findBinaries builds the simulation's components the first time (the
// scripts cache them by version) and checks nodemend's own are built.
func findBinaries(opts Options) (binaries, error) {
	root := testenv.RepoRoot()
	var b binaries
	var err error
	if b.sim, err = testenv.BuildScript("sim-binaries.sh"); err != nil {
		return b, err
	}
	if b.kube, err = testenv.BuildScript("kube-binaries.sh", "etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"); err != nil {
		return b, err
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Setenv("KUBEBUILDER_ASSETS", b.kube) // testenv.Start reads it
	}
	bin := BinDir(root, opts.BinDir)
	b.agent = filepath.Join(bin, "nodemend-agent")
	b.controller = filepath.Join(bin, "nodemend-controller")
	b.nvidiaSMI = filepath.Join(bin, "sim", "fake-nvidia-smi")
	var missing []string
	for _, f := range []string{b.agent, b.controller, b.nvidiaSMI} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("%s not built: `make build` builds them into bin/, `hack/demo.sh --build` into bin/demo", strings.Join(missing, ", "))
	}
	return b, nil
}

// BinDir is where nodemend's own binaries are for a repository at root:
// dir (relative to root unless absolute), or root's bin/ when dir is empty.
func BinDir(root, dir string) string {
	switch {
	case dir == "":
		return filepath.Join(root, "bin")
	case filepath.IsAbs(dir):
		return dir
	}
	return filepath.Join(root, dir)
}

// logTail is the last n lines of a log file.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

var errNotRoot = errors.New("the simulated nodes' kubelet endpoints need a network namespace: run as root")
