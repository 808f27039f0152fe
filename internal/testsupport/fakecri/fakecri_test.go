package fakecri

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func start(t *testing.T) (*Server, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fakecri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	srv, err := Start(filepath.Join(dir, "run", "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+srv.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return srv, runtimeapi.NewRuntimeServiceClient(conn)
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func TestStateAndFilters(t *testing.T) {
	srv, rs := start(t)
	sb := srv.RunPod("default", "web-0", "uid-1", "web", "envoy")
	srv.RunPod("default", "web-1", "uid-2", "web")
	srv.StopPod("uid-2")

	v, err := rs.Version(ctx(t, 5*time.Second), &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeApiVersion != "v1" {
		t.Fatalf("Version: %v %v", v, err)
	}
	st, err := rs.Status(ctx(t, 5*time.Second), &runtimeapi.StatusRequest{})
	if err != nil || len(st.Status.Conditions) != 2 {
		t.Fatalf("Status: %v %v", st, err)
	}

	all, err := rs.ListContainers(ctx(t, 5*time.Second), &runtimeapi.ListContainersRequest{})
	if err != nil || len(all.Containers) != 3 {
		t.Fatalf("all containers: %v %v", all, err)
	}
	running, _ := rs.ListContainers(ctx(t, 5*time.Second), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if len(running.Containers) != 2 {
		t.Errorf("running: %v", running.Containers)
	}
	for _, c := range running.Containers {
		if c.PodSandboxId != sb || c.Labels[LabelPodUID] != "uid-1" || c.Labels[LabelPodNamespace] != "default" ||
			c.Labels[LabelPodName] != "web-0" || c.Labels[LabelContainerName] != c.Metadata.Name {
			t.Errorf("container %v", c)
		}
	}
	byLabel, _ := rs.ListContainers(ctx(t, 5*time.Second), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{LabelPodUID: "uid-2"},
	}})
	if len(byLabel.Containers) != 1 || byLabel.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("by label: %v", byLabel.Containers)
	}

	ready, _ := rs.ListPodSandbox(ctx(t, 5*time.Second), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if len(ready.Items) != 1 || ready.Items[0].Id != sb || ready.Items[0].Metadata.Uid != "uid-1" {
		t.Errorf("ready sandboxes: %v", ready.Items)
	}

	srv.RemovePod("uid-1")
	if len(srv.Containers()) != 1 || len(srv.Sandboxes()) != 1 {
		t.Errorf("after RemovePod: %v %v", srv.Containers(), srv.Sandboxes())
	}
	if srv.Calls(MethodListContainers) != 3 || srv.Calls(MethodListPodSandbox) != 1 || srv.Calls(MethodVersion) != 1 {
		t.Errorf("calls: %d %d %d", srv.Calls(MethodListContainers), srv.Calls(MethodListPodSandbox), srv.Calls(MethodVersion))
	}
}

func TestFaults(t *testing.T) {
	srv, rs := start(t)

	srv.Fail(codes.Unavailable, MethodStatus)
	if _, err := rs.Status(ctx(t, 5*time.Second), &runtimeapi.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("Status: %v", err)
	}
	if _, err := rs.Version(ctx(t, 5*time.Second), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version should still answer: %v", err)
	}

	srv.Hang()
	if _, err := rs.Version(ctx(t, 100*time.Millisecond), &runtimeapi.VersionRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("hung Version: %v", err)
	}
	srv.Heal(MethodVersion) // everything else still hangs
	if _, err := rs.Version(ctx(t, 5*time.Second), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("healed Version: %v", err)
	}
	if _, err := rs.Status(ctx(t, 100*time.Millisecond), &runtimeapi.StatusRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Status should still hang: %v", err)
	}
	srv.Heal()
	if _, err := rs.Status(ctx(t, 5*time.Second), &runtimeapi.StatusRequest{}); err != nil {
		t.Errorf("healed: %v", err)
	}
	if _, err := rs.ContainerStatus(ctx(t, 5*time.Second), &runtimeapi.ContainerStatusRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("unimplemented method: %v", err)
	}

	// Stop releases a hanging call and removes the socket.
	srv.Hang()
	done := make(chan error, 1)
	go func() {
		_, err := rs.Version(ctx(t, time.Minute), &runtimeapi.VersionRequest{})
		done <- err
	}()
	for srv.Calls(MethodVersion) < 4 {
		time.Sleep(time.Millisecond)
	}
	srv.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Error("call on a stopped server succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not release the hanging call")
	}
	if _, err := os.Stat(srv.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	srv.Stop() // idempotent
}

func TestStartReplacesStaleSocket(t *testing.T) {
	srv, _ := start(t)
	path := srv.SocketPath()
	// A crashed runtime leaves its socket file behind.
	srv.lis.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	srv.srv.Stop()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("expected a stale socket: %v", err)
	}
	srv2, err := Start(path)
	if err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	srv2.Stop()

	// A regular file is not replaced.
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(path); err == nil {
		t.Error("Start replaced a regular file")
	}
}
