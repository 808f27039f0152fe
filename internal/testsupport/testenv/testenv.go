// Package testenv runs integration tests against a real kube-apiserver and
// etcd (controller-runtime envtest), built from the Go module proxy at the
// versions pinned in hack/kubebin by hack/kube-binaries.sh.
//
// Binaries come from KUBEBUILDER_ASSETS when set (make test sets it);
// otherwise the build script is run, which returns at once when its cache is
// warm and builds them the first time. Tests never fall back to a fake client
// and never skip.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client kubernetes.Interface
	env    *envtest.Environment
}

// Options tune the control plane.
type Options struct {
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
	// APIServerFlags are extra kube-apiserver flags (name → value).
	APIServerFlags map[string]string
}

// Start starts etcd and kube-apiserver and returns once the API answers.
func Start(opts Options) (*Env, error) {
	assets, err := BinaryDir()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	args := te.ControlPlane.GetAPIServer().Configure()
	for k, v := range opts.APIServerFlags {
		args.Set(k, v)
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	// Tests write fast; the default client-side rate limit (5 qps) would be
	// what they measure.
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = te.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: cs, env: te}, nil
}

// AdminKubeconfig returns a kubeconfig of a new system:masters user, for
// processes that need a file: kube-scheduler, kube-controller-manager, kwok,
// Karpenter and nodemend's own binaries in the local simulation.
func (e *Env) AdminKubeconfig(name string) ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// Stop ends the control plane's processes.
func (e *Env) Stop() error { return e.env.Stop() }

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// BinaryDir returns the directory holding etcd and kube-apiserver, building
// them with hack/kube-binaries.sh when KUBEBUILDER_ASSETS is not set.
func BinaryDir() (string, error) {
	binOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			binDir = dir
			return
		}
		binDir, binErr = BuildScript("kube-binaries.sh")
	})
	return binDir, binErr
}

// BuildScript runs hack/<script> with args — one of the scripts that build
// pinned tools into a cache and return at once when it is warm — with its
// progress on stderr, and returns the last line it prints (where the result
// is).
func BuildScript(script string, args ...string) (string, error) {
	path := filepath.Join(RepoRoot(), "hack", script)
	cmd := exec.Command("bash", append([]string{path}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/%s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// RepoRoot is the root of this repository, found from this source file. A
// binary built with -trimpath knows the file only by its module path
// (hack/demo.sh builds the demo so, to reuse the packages `make build`
// compiled): the root is then the working directory or the nearest directory
// above it whose go.mod is this module's.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	wd, err := os.Getwd()
	if err != nil {
		wd = "."
	}
	return repoRoot(file, wd)
}

// repoRoot is RepoRoot for this source file's path as the binary knows it
// and the working directory.
func repoRoot(file, wd string) string {
	if filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			if first, _, _ := strings.Cut(string(data), "\n"); strings.TrimSpace(first) == "module nodemend.dev/nodemend" {
				return dir
			}
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// Main is a TestMain body for packages that share one control plane: it
// starts it, hands it to setup (which builds the package's clients), runs the
// tests, stops it and exits. A failed start or setup ends the run with the
// error.
func Main(m interface{ Run() int }, opts Options, setup func(*Env) error) {
	env, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := setup(env); err != nil {
		_ = env.Stop()
		fmt.Fprintln(os.Stderr, "test setup:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// NodemendCRDs is the directory of nodemend's generated CRDs.
func NodemendCRDs() string { return filepath.Join(RepoRoot(), "deploy", "crds") }
