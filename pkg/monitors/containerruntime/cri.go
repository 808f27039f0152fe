package containerruntime

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxMsgSize matches the kubelet's CRI client: a busy node's ListContainers
// answer does not fit gRPC's 4 MiB default.
const maxMsgSize = 16 << 20

// criClient is a thin CRI client over a unix socket. It talks to runtimeapi
// directly rather than through k8s.io/cri-client: that client dials and calls
// Version inside its constructor (so it cannot even be built while the runtime
// is down, the very case this monitor watches for), logs every failed call at
// error level through klog, and would pull OpenTelemetry into the agent.
//
// The connection is made lazily and dropped after any failed call, so a
// restarted runtime (new socket inode) is seen on the next check instead of
// after gRPC's reconnect backoff. A dropped connection is closed only after
// the call timeout, so that a call another check has in flight on it is not
// cut short.
type criClient struct {
	path    string // socket path on the agent's filesystem (host root applied)
	timeout time.Duration

	mu   sync.Mutex
	conn *grpc.ClientConn
}

func (c *criClient) client() (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		path := c.path
		conn, err := grpc.NewClient("passthrough:///cri",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithAuthority("localhost"),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: c.timeout,
			}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
		)
		if err != nil {
			return nil, err
		}
		c.conn = conn
	}
	return c.conn, nil
}

// drop detaches conn if it is still the current connection, and closes it
// once calls in flight on it have timed out.
func (c *criClient) drop(conn *grpc.ClientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != conn {
		return
	}
	c.conn = nil
	time.AfterFunc(c.timeout, func() { _ = conn.Close() })
}

// close closes the connection now; a later call dials again.
func (c *criClient) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// callConn runs one call on the runtime's connection under the call
// timeout, for the services containerd serves beside CRI on the same
// socket. A failure drops the connection and is returned as "<name>: <error>".
func (c *criClient) callConn(ctx context.Context, name string, fn func(context.Context, *grpc.ClientConn) error) error {
	conn, err := c.client()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	err = fn(cctx, conn)
	cancel()
	if err != nil {
		c.drop(conn)
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// call runs one CRI call under the call timeout. A failure drops the
// connection and is returned as "<name>: <error>".
func (c *criClient) call(ctx context.Context, name string, fn func(context.Context, runtimeapi.RuntimeServiceClient) error) error {
	return c.callConn(ctx, name, func(ctx context.Context, conn *grpc.ClientConn) error {
		return fn(ctx, runtimeapi.NewRuntimeServiceClient(conn))
	})
}

// probe asks the runtime Version, Status and the ready sandboxes, stopping at
// the first call that fails (a hung runtime costs one timeout, not three).
func (c *criClient) probe(ctx context.Context) error {
	if err := c.call(ctx, "Version", func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		_, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}); err != nil {
		return err
	}
	if err := c.call(ctx, "Status", func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		_, err := rs.Status(ctx, &runtimeapi.StatusRequest{})
		return err
	}); err != nil {
		return err
	}
	_, err := c.readySandboxes(ctx)
	return err
}

func (c *criClient) readySandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	var items []*runtimeapi.PodSandbox
	err := c.call(ctx, "ListPodSandbox", func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		resp, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		}})
		items = resp.GetItems()
		return err
	})
	return items, err
}

func (c *criClient) runningContainers(ctx context.Context) ([]*runtimeapi.Container, error) {
	var items []*runtimeapi.Container
	err := c.call(ctx, "ListContainers", func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
		resp, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		}})
		items = resp.GetContainers()
		return err
	})
	return items, err
}
