package realnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Tools are the binaries the node runs that are not Debian packages.
type Tools struct {
	// KubeBin holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kube-proxy (hack/kube-binaries.sh).
	KubeBin string
	// Helm is the helm CLI (hack/helm.sh).
	Helm string
	// Images holds the OCI image tarballs (make images, _output/images).
	Images string
	// MetadataMock is AWS's EC2 metadata mock (hack/metadata-mock.sh),
	// the agent's cloud metadata service on this node: the chart points
	// the agent at it on loopback, never at the real link-local address
	// (empty: nothing listens there, and the agent reads no metadata).
	MetadataMock string
}

// StartOptions choose what start does beyond the node itself.
type StartOptions struct {
	Tools Tools
	// Values are extra values files for helm install, after the node's own.
	Values []string
	// NoChart starts the node without installing nodemend.
	NoChart bool
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// Phase is one step of start and how long it took.
type Phase struct {
	Name     string
	Duration time.Duration
}

// Start checks the machine, records what it found, and starts the node;
// on error everything started is stopped again (the error says what went
// wrong and where the logs are).
func (l Layout) Start(ctx context.Context, o StartOptions) (phases []Phase, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := l.Preflight(); err != nil {
		return nil, err
	}
	imgs, err := findImages(o.Tools.Images)
	if err != nil {
		return nil, err
	}
	closeInheritedFDs()
	f, err := recordFound()
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(l.State); err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(l.State, "conf"), l.LogDir(), l.pidDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := l.saveFound(f); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			o.Logf("start failed; stopping what was started (logs: %s)", l.LogDir())
			if serr := l.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("and stopping: %w", serr))
			}
		}
	}()
	phase := func(name string, run func() error) error {
		t0 := time.Now()
		o.Logf("%s", name)
		if err := run(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		phases = append(phases, Phase{name, time.Since(t0)})
		return nil
	}
	var client kubernetes.Interface
	steps := []struct {
		name string
		run  func() error
	}{
		{"writing certificates and configs", func() error { return l.writeFiles(imgs) }},
		{"creating the node's link and pod bridge", func() error {
			if f.RootPrivate {
				// As on a systemd host: containers' HostToContainer mounts
				// (the agent's view of the host) need a shared source.
				if out, err := exec.Command("mount", "--make-rshared", "/").CombinedOutput(); err != nil {
					return fmt.Errorf("mount --make-rshared /: %v: %s", err, out)
				}
			}
			return l.setUpNetwork()
		}},
		{"starting etcd and kube-apiserver", func() error {
			if _, err := l.startDaemon("etcd", filepath.Join(o.Tools.KubeBin, "etcd"), l.etcdArgs()...); err != nil {
				return err
			}
			if _, err := l.startDaemon("kube-apiserver", filepath.Join(o.Tools.KubeBin, "kube-apiserver"), l.apiServerArgs()...); err != nil {
				return err
			}
			var err error
			client, err = l.waitAPIServer(ctx)
			if err != nil {
				return err
			}
			return l.bootstrapRBAC(ctx, client)
		}},
		{"starting kube-controller-manager and kube-scheduler", func() error {
			if _, err := l.startDaemon("kube-controller-manager", filepath.Join(o.Tools.KubeBin, "kube-controller-manager"), l.controllerManagerArgs()...); err != nil {
				return err
			}
			_, err := l.startDaemon("kube-scheduler", filepath.Join(o.Tools.KubeBin, "kube-scheduler"), l.schedulerArgs()...)
			return err
		}},
		{"starting containerd and importing the images", func() error {
			if err := l.StartContainerd(ctx); err != nil {
				return err
			}
			return l.importImages(ctx, imgs)
		}},
		{"starting the kubelet", func() error {
			if err := l.createCgroups(); err != nil {
				return err
			}
			if _, err := l.startDaemon("kubelet", filepath.Join(o.Tools.KubeBin, "kubelet"), l.kubeletArgs()...); err != nil {
				return err
			}
			if err := l.waitNodeReady(ctx, client); err != nil {
				return err
			}
			// The kubelet has set its kernel tunables (once, at start);
			// this machine's own values go back at once.
			return restoreSysctls(f, kubeletTunables())
		}},
		{"starting the EC2 metadata mock", func() error {
			if o.Tools.MetadataMock == "" {
				return nil
			}
			// IMDSv2 only; the scheduled event and spot notice held back a
			// day, so a node of this machine warns of nothing it did not ask for.
			port := strconv.Itoa(l.Ports.Metadata)
			if _, err := l.startDaemon("ec2-metadata-mock", o.Tools.MetadataMock,
				"--hostname", "127.0.0.1", "--port", port, "--imdsv2", "--mock-delay-sec", "86400"); err != nil {
				return err
			}
			// IMDSv2 answers a GET without a session token 401, so
			// readiness is the session handshake the agent makes first.
			return l.waitReady(ctx, "ec2-metadata-mock", func(ctx context.Context) *http.Request {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://127.0.0.1:"+port+"/latest/api/token", nil)
				req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
				return req
			}, nil)
		}},
		{"starting kube-proxy", func() error {
			if _, err := l.startDaemon("kube-proxy", filepath.Join(o.Tools.KubeBin, "kube-proxy"), l.kubeProxyArgs()...); err != nil {
				return err
			}
			return l.waitHTTP(ctx, "kube-proxy", fmt.Sprintf("http://127.0.0.1:%d/healthz", l.Ports.ProxyHealthz), nil)
		}},
	}
	if !o.NoChart {
		steps = append(steps, struct {
			name string
			run  func() error
		}{"installing the chart", func() error { return l.installChart(ctx, client, o.Tools.Helm, imgs, o.Values) }})
	}
	for _, s := range steps {
		if err := phase(s.name, s.run); err != nil {
			return phases, err
		}
		if err := l.exitedEarly(); err != nil {
			return phases, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return phases, nil
}

// writeFiles writes the PKI, kubeconfigs and component configs.
func (l Layout) writeFiles(imgs Images) error {
	if err := l.writePKI(time.Now()); err != nil {
		return err
	}
	files := map[string]string{
		"admin.kubeconfig":              l.kubeconfig("admin"),
		"controller-manager.kubeconfig": l.kubeconfig("controller-manager"),
		"scheduler.kubeconfig":          l.kubeconfig("scheduler"),
		"kube-proxy.kubeconfig":         l.kubeconfig("kube-proxy"),
		"kubelet.kubeconfig":            l.kubeconfig("kubelet"),
		"containerd.toml":               l.containerdConfig(imgs.Pause),
		"kubelet.yaml":                  l.kubeletConfig(),
		"kube-proxy.yaml":               l.kubeProxyConfig(),
	}
	for name, content := range files {
		if err := os.WriteFile(l.conf(name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(l.Admin(), []byte(l.kubeconfig("admin")), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(l.cniConfDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.cniConfDir(), "10-nodemend-node.conflist"), []byte(l.cniConfig()), 0o644)
}

// StartContainerd starts containerd (also after a scenario stopped it) and
// waits for its socket to answer.
func (l Layout) StartContainerd(ctx context.Context) error {
	if _, err := l.startDaemon("containerd", "containerd", "--config", l.conf("containerd.toml")); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := l.ctr(ctx, "version")
		if err == nil {
			return nil
		}
		if d, ok, _ := l.recorded("containerd"); !ok || !d.alive() {
			return fmt.Errorf("containerd exited: %s", l.logTail("containerd", 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not answer on %s in 60s: %v: %s", l.CRISocket(), err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Daemon returns a recorded daemon's PID (0 when it is not running).
func (l Layout) Daemon(name string) int {
	d, ok, _ := l.recorded(name)
	if !ok || !d.alive() {
		return 0
	}
	return d.Pid
}

// StopDaemon stops one daemon (the runtime scenario stops containerd).
func (l Layout) StopDaemon(name string, grace time.Duration) {
	if d, ok, _ := l.recorded(name); ok {
		d.stop(grace)
	}
}

func (l Layout) ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", l.CRISocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// exitedEarly reports a daemon that was started but no longer runs.
func (l Layout) exitedEarly() error {
	for _, n := range daemonNames() {
		d, ok, _ := l.recorded(n)
		if ok && !d.alive() {
			return fmt.Errorf("%s (pid %d) exited: %s", n, d.Pid, l.logTail(n, 15))
		}
	}
	return nil
}

func (l Layout) logTail(name string, n int) string {
	data, _ := os.ReadFile(filepath.Join(l.LogDir(), name+".log"))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("last lines of %s:\n%s", filepath.Join(l.LogDir(), name+".log"), strings.Join(lines, "\n"))
}

// Client is an admin client of the node's API server.
func (l Layout) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Admin())
	if err != nil {
		return nil, err
	}
	// Certificates inline: client-go caches TLS transports by file path,
	// and a second start of the node writes new ones at the same paths.
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, err
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = "", "", ""
	return kubernetes.NewForConfig(cfg)
}

func (l Layout) waitAPIServer(ctx context.Context) (kubernetes.Interface, error) {
	ca, err := os.ReadFile(l.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(l.pki("admin.crt"), l.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tlsc := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	if err := l.waitHTTP(ctx, "kube-apiserver", l.APIServerURL()+"/readyz", tlsc); err != nil {
		return nil, err
	}
	return l.Client()
}

// waitHTTP polls url until it answers 200, for up to two minutes, failing
// at once if the daemon exits.
func (l Layout) waitHTTP(ctx context.Context, daemonName, url string, tlsc *tls.Config) error {
	return l.waitReady(ctx, daemonName, func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		return req
	}, tlsc)
}

// waitReady sends probe's request until it is answered 200 OK, the daemon
// exits, or two minutes pass.
func (l Layout) waitReady(ctx context.Context, daemonName string, probe func(context.Context) *http.Request, tlsc *tls.Config) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsc}}
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for {
		req := probe(ctx)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if d, ok, _ := l.recorded(daemonName); !ok || !d.alive() {
			return fmt.Errorf("%s exited: %s", daemonName, l.logTail(daemonName, 15))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not become healthy at %s %s in 2m (last: %s); %s", daemonName, req.Method, req.URL, last, l.logTail(daemonName, 10))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (l Layout) bootstrapRBAC(ctx context.Context, c kubernetes.Interface) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodemend-node:kube-apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "kube-apiserver-kubelet-client"}},
	}
	// The API server creates its bootstrap roles right after it is ready;
	// a binding may be refused for a moment before.
	var err error
	for i := 0; i < 50; i++ {
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (l Layout) waitNodeReady(ctx context.Context, c kubernetes.Interface) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := c.CoreV1().Nodes().Get(ctx, l.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if err := l.exitedEarly(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node %s did not become Ready in 3m; %s", l.NodeName, l.logTail("kubelet", 20))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
