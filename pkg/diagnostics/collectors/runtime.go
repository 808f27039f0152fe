package collectors

import (
	"context"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

const catRuntime = "runtime"

// criSockets are tried in order when Env.CRISocket is empty.
func criSockets() []string {
	return []string{"run/containerd/containerd.sock", "run/crio/crio.sock", "var/run/containerd/containerd.sock", "var/run/crio/crio.sock"}
}

func runtimeCollectors(e *Env) []collect.Collector {
	cri := func(name, file string, call func(context.Context, *grpc.ClientConn) (proto.Message, error)) collect.Collector {
		return collect.Collector{Name: "runtime/cri-" + name, Category: catRuntime, Run: func(ctx context.Context, out *collect.Output) error {
			conn, err := e.dialCRI()
			if err != nil {
				return err
			}
			defer conn.Close()
			msg, err := call(ctx, conn)
			if status.Code(err) == codes.Unimplemented {
				return collect.Skip("the runtime does not implement it: %v", err)
			}
			if err != nil {
				return err
			}
			data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(msg)
			if err != nil {
				return err
			}
			return out.WriteFile(file, append(data, '\n'))
		}}
	}
	rt := runtimeapi.NewRuntimeServiceClient
	return []collect.Collector{
		cri("version", "cri/version.json", func(ctx context.Context, c *grpc.ClientConn) (proto.Message, error) {
			return rt(c).Version(ctx, &runtimeapi.VersionRequest{})
		}),
		// Status with verbose info carries the runtime's effective config
		// (registry credentials in it are redacted like everything else).
		cri("status", "cri/status.json", func(ctx context.Context, c *grpc.ClientConn) (proto.Message, error) {
			return rt(c).Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		}),
		cri("pods", "cri/pods.json", func(ctx context.Context, c *grpc.ClientConn) (proto.Message, error) {
			return rt(c).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		}),
		cri("containers", "cri/containers.json", func(ctx context.Context, c *grpc.ClientConn) (proto.Message, error) {
			return rt(c).ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		}),
		cri("images", "cri/images.json", func(ctx context.Context, c *grpc.ClientConn) (proto.Message, error) {
			return runtimeapi.NewImageServiceClient(c).ListImages(ctx, &runtimeapi.ListImagesRequest{})
		}),
		filesCollector(e, catRuntime, "config", 0,
			"etc/containerd/config.toml", "etc/containerd/conf.d/*.toml", "etc/containerd/certs.d/*/hosts.toml",
			"etc/crio/crio.conf", "etc/crio/crio.conf.d/*", "etc/docker/daemon.json",
			"var/lib/kubelet/config.yaml", "etc/kubernetes/kubelet/*.json", "etc/kubernetes/kubelet/*.yaml",
			"etc/kubernetes/kubelet.conf", "etc/kubernetes/bootstrap-kubelet.conf", "var/lib/kubelet/kubeconfig",
			"etc/systemd/system/kubelet.service", "etc/systemd/system/kubelet.service.d/*.conf",
			"usr/lib/systemd/system/kubelet.service", "etc/default/kubelet", "etc/sysconfig/kubelet",
			"etc/eks/containerd/containerd-config.toml", "var/lib/kubelet/cpu_manager_state", "var/lib/kubelet/memory_manager_state"),
		kubeletFiles(e),
	}
}

// dialCRI connects to the first CRI socket present. gRPC dials lazily; the
// call's context bounds the connection attempt.
func (e *Env) dialCRI() (*grpc.ClientConn, error) {
	candidates := criSockets()
	if e.CRISocket != "" {
		candidates = []string{strings.TrimPrefix(e.CRISocket, "unix://")}
	}
	var path string
	for _, c := range candidates {
		p := e.hostPath(c)
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			path = p
			break
		}
	}
	if path == "" {
		return nil, collect.Skip("no CRI socket at %v", candidates)
	}
	return grpc.NewClient("passthrough:///cri",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32<<20)),
		grpc.WithIdleTimeout(10*time.Second),
	)
}
