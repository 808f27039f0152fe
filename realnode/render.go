package realnode

import (
	"fmt"
	"path/filepath"
)

// The node's configuration files, rendered from the layout alone (no I/O):
// unit tests read them back with the components' own config types.

// kubeconfig is a client config that authenticates with a certificate.
func (l Layout) kubeconfig(user string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: nodemend-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: nodemend-node
  context: {cluster: nodemend-node, user: %s}
current-context: nodemend-node
`, l.APIServerURL(), l.pki("ca.crt"), user, l.pki(user+".crt"), l.pki(user+".key"), user)
}

// CNIBinDir is where Debian's containernetworking-plugins installs them.
const CNIBinDir = "/usr/lib/cni"

func (l Layout) cniConfDir() string { return filepath.Join(l.Var, "cni", "net.d") }

// containerdConfig is containerd's config: its own root, state and socket;
// runc with cgroupfs; the CRI plugin with the CNI bridge network and the
// locally built pause image.
//
// restrict_oom_score_adj: root on this kind of machine lacks
// CAP_SYS_RESOURCE and cannot lower oom_score_adj; without it runc fails
// every container of a pod with a negative score ("can't get final child's
// PID from pipe"). The shims' runc state goes under Run (options.Root).
func (l Layout) containerdConfig(pauseImage string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

# The legacy v1 runtime (the tasks service needs it loaded) keeps its
# state here instead of /run/containerd/runc.
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, l.ContainerdRoot(), filepath.Join(l.Run, "containerd"), l.CRISocket(), l.CRISocket()+".ttrpc",
		filepath.Join(l.Var, "containerd-opt"), filepath.Join(l.Run, "runc-v1"), pauseImage, filepath.Join(l.Run, "runc"), CNIBinDir, l.cniConfDir())
}

// cniConfig is the pod network: the bridge Start creates (with the
// gateway address on it), host-local addresses, and routes to the service
// range and the node only — no default route, no masquerade, and the
// bridge plugin is not the gateway, so it leaves IP forwarding as the
// machine has it: pods reach the API server through the kubernetes
// Service (kube-proxy's DNAT lands on the node itself) and nothing off the
// machine.
func (l Layout) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "nodemend-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": %q, "gw": %q}, {"dst": "%s/32", "gw": %q}]
      }
    }
  ]
}
`, l.Bridge, filepath.Join(l.Var, "cni", "ipam"), l.PodCIDR, l.Gateway,
		l.ServiceCIDR, l.Gateway, l.NodeIP, l.Gateway)
}

// kubeletConfig is the KubeletConfiguration. What this machine needs:
// failCgroupV1 false (a cgroup v1 host), cgroupfs, oomScoreAdj 0 (root
// cannot lower its own score here). nodeStatusReportFrequency 10s: the
// kubelet writes its status often, which the no-lost-writes test needs.
// Everything it writes outside its root dir is moved under Var where the
// kubelet allows it (pod logs, volume plugins); /var/log/containers is
// fixed in the kubelet and removed by Stop when Start created it.
func (l Layout) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: %s
volumePluginDir: %s
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
shutdownGracePeriod: 0s
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
`, l.NodeIP, l.Ports.Kubelet, l.Ports.KubeletHealthz, l.pki("kubelet-serving.crt"), l.pki("kubelet-serving.key"),
		l.pki("ca.crt"), l.CRISocket(), l.CgroupRoot, filepath.Join(l.Var, "pod-logs"),
		filepath.Join(l.Var, "volume-plugins"))
}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode, and nothing
// changed on the machine beyond its own chains — conntrack limits and
// timeouts left as they are (0), no route_localnet (localhostNodePorts
// false), node ports on the node's address only.
func (l Layout) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: iptables
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
clusterCIDR: %s
nodePortAddresses: ["%s/32"]
oomScoreAdj: 0
iptables:
  localhostNodePorts: false
  masqueradeAll: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, l.conf("kube-proxy.kubeconfig"), l.NodeName, l.NodeIP, l.Ports.ProxyHealthz, l.Ports.ProxyMetrics, l.PodCIDR, l.NodeIP)
}

// etcdArgs, apiServerArgs, ... are the control plane's flags.
func (l Layout) etcdArgs() []string {
	peer := fmt.Sprintf("http://127.0.0.1:%d", l.Ports.EtcdPeer)
	client := fmt.Sprintf("http://127.0.0.1:%d", l.Ports.Etcd)
	return []string{
		"--name=nodemend-node", "--data-dir=" + filepath.Join(l.State, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=nodemend-node=" + peer, "--unsafe-no-fsync", "--listen-metrics-urls=",
	}
}

func (l Layout) apiServerArgs() []string {
	return []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", l.Ports.Etcd),
		"--bind-address=" + l.NodeIP.String(), "--advertise-address=" + l.NodeIP.String(),
		fmt.Sprintf("--secure-port=%d", l.Ports.APIServer),
		"--tls-cert-file=" + l.pki("apiserver.crt"), "--tls-private-key-file=" + l.pki("apiserver.key"),
		"--client-ca-file=" + l.pki("ca.crt"),
		"--kubelet-client-certificate=" + l.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + l.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + l.pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + l.pki("sa.pub"), "--service-account-signing-key-file=" + l.pki("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + l.ServiceCIDR.String(),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false",
	}
}

func (l Layout) controllerManagerArgs() []string {
	return []string{
		"--kubeconfig=" + l.conf("controller-manager.kubeconfig"),
		"--authentication-kubeconfig=" + l.conf("controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + l.conf("controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", l.Ports.ControllerManager),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + l.pki("sa.key"),
		"--root-ca-file=" + l.pki("ca.crt"),
		// Its default is under /usr/libexec, which it would create.
		"--flex-volume-plugin-dir=" + filepath.Join(l.Var, "volume-plugins"),
		"--cluster-signing-cert-file=" + l.pki("ca.crt"), "--cluster-signing-key-file=" + l.pki("ca.key"),
		"--leader-elect=false",
	}
}

func (l Layout) schedulerArgs() []string {
	return []string{
		"--kubeconfig=" + l.conf("scheduler.kubeconfig"),
		"--authentication-kubeconfig=" + l.conf("scheduler.kubeconfig"),
		"--authorization-kubeconfig=" + l.conf("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", l.Ports.Scheduler),
		"--leader-elect=false",
	}
}

func (l Layout) kubeletArgs() []string {
	return []string{
		"--config=" + l.conf("kubelet.yaml"),
		"--kubeconfig=" + l.conf("kubelet.kubeconfig"),
		"--root-dir=" + l.KubeletRoot(),
		"--hostname-override=" + l.NodeName,
		"--node-ip=" + l.NodeIP.String(),
	}
}

func (l Layout) kubeProxyArgs() []string {
	return []string{"--config=" + l.conf("kube-proxy.yaml")}
}
