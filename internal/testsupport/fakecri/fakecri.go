// Package fakecri is a small, real CRI runtime service (gRPC over a unix
// socket) with scripted state, for tests and the local simulation.
//
// It answers Version, Status, ListPodSandbox and ListContainers from an
// in-memory table of sandboxes and containers that the test edits (RunPod,
// StopPod, RemovePod, AddSandbox, AddContainer, ...), and containerd's
// introspection Server call with scripted deprecations (SetDeprecations).
// Every other CRI method answers Unimplemented. Faults are scripted per
// method: Hang makes calls block until the caller's deadline (or Stop), Fail
// makes them return a gRPC code.
// Calls are counted per method, faulty or not.
//
// Method names are the short gRPC method names: "Version", "Status",
// "ListPodSandbox", "ListContainers", ... (see the Method constants).
package fakecri

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	introspection "github.com/containerd/containerd/api/services/introspection/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Method names, as counted by Calls and scripted by Hang and Fail.
const (
	MethodVersion        = "Version"
	MethodStatus         = "Status"
	MethodListPodSandbox = "ListPodSandbox"
	MethodListContainers = "ListContainers"
	// MethodIntrospectionServer is containerd's introspection Server call,
	// served beside CRI on containerd's socket; Fail it with Unimplemented
	// to be a runtime other than containerd.
	MethodIntrospectionServer = "Server"
)

// Labels the kubelet puts on sandboxes and containers.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
)

// Server is a running fake CRI runtime. All methods are safe for concurrent use.
type Server struct {
	path string
	lis  net.Listener
	srv  *grpc.Server
	done chan struct{}

	mu         sync.Mutex
	sandboxes  map[string]*runtimeapi.PodSandbox
	containers map[string]*runtimeapi.Container
	faults     map[string]fault // "" applies to every method without its own entry
	calls      map[string]int
	seq        int
	// deprecations are what containerd's introspection API reports.
	deprecations []*introspection.DeprecationWarning
}

type fault struct {
	hang bool
	code codes.Code
}

// Start listens on socketPath (creating its directory; replacing a stale
// socket left there) and serves until Stop.
func Start(socketPath string) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(socketPath); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("fakecri: %s exists and is not a socket", socketPath)
		}
		if err := os.Remove(socketPath); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, err
	}
	s := &Server{
		path:       socketPath,
		lis:        lis,
		done:       make(chan struct{}),
		sandboxes:  map[string]*runtimeapi.PodSandbox{},
		containers: map[string]*runtimeapi.Container{},
		faults:     map[string]fault{},
		calls:      map[string]int{},
	}
	s.srv = grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := s.enter(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := s.enter(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
	runtimeapi.RegisterRuntimeServiceServer(s.srv, service{s: s})
	introspection.RegisterIntrospectionServer(s.srv, introspectionService{s: s})
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// SocketPath is the path the server listens on.
func (s *Server) SocketPath() string { return s.path }

// Stop closes the listener and every connection, releases hanging calls and
// removes the socket file. Safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return
	default:
		close(s.done)
	}
	s.mu.Unlock()
	// Close the listener here rather than leave it to grpc: when Serve has not
	// started yet, grpc closes it later, and its unlink-on-close would then
	// remove whatever file is at the path by that time.
	_ = s.lis.Close()
	s.srv.Stop()
	_ = os.Remove(s.path)
}

// enter counts a call and applies the method's scripted fault.
func (s *Server) enter(ctx context.Context, fullMethod string) error {
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	s.mu.Lock()
	s.calls[method]++
	f, ok := s.faults[method]
	if !ok {
		f = s.faults[""]
	}
	s.mu.Unlock()
	switch {
	case f.hang:
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return status.Error(codes.Unavailable, "fakecri: server stopped")
		}
	case f.code != codes.OK:
		return status.Errorf(f.code, "fakecri: scripted %s failure", method)
	}
	return nil
}

// Hang makes calls of methods (every method when none is given) block until
// the caller's context ends or the server stops.
func (s *Server) Hang(methods ...string) { s.setFault(fault{hang: true}, methods) }

// Fail makes calls of methods (every method when none is given) fail with code.
func (s *Server) Fail(code codes.Code, methods ...string) { s.setFault(fault{code: code}, methods) }

// Heal removes the faults of methods (all faults when none is given).
func (s *Server) Heal(methods ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(methods) == 0 {
		clear(s.faults)
		return
	}
	for _, m := range methods {
		s.faults[m] = fault{} // explicit "healthy" overrides a global fault
	}
}

func (s *Server) setFault(f fault, methods []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(methods) == 0 {
		clear(s.faults)
		s.faults[""] = f
		return
	}
	for _, m := range methods {
		s.faults[m] = f
	}
}

// Calls returns how many calls of method the server received.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// ResetCalls zeroes the call counters.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
}

// RunPod adds a ready sandbox for the pod namespace/name with the given UID,
// and one running container per name, labelled as the kubelet labels them.
// It returns the sandbox ID.
func (s *Server) RunPod(namespace, name, uid string, containers ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	s.seq++
	sbID := fmt.Sprintf("sandbox-%d", s.seq)
	s.sandboxes[sbID] = &runtimeapi.PodSandbox{
		Id:        sbID,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		State:     runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: now,
		Labels:    map[string]string{LabelPodUID: uid, LabelPodName: name, LabelPodNamespace: namespace},
	}
	for _, c := range containers {
		s.seq++
		id := fmt.Sprintf("container-%d", s.seq)
		s.containers[id] = &runtimeapi.Container{
			Id:           id,
			PodSandboxId: sbID,
			Metadata:     &runtimeapi.ContainerMetadata{Name: c},
			State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt:    now,
			Labels: map[string]string{
				LabelPodUID: uid, LabelPodName: name, LabelPodNamespace: namespace, LabelContainerName: c,
			},
		}
	}
	return sbID
}

// StopPod marks the containers of the pod with uid exited and its sandboxes
// not ready, as the runtime reports a pod that was stopped but not removed.
func (s *Server) StopPod(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.containers {
		if c.Labels[LabelPodUID] == uid {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
	}
	for _, sb := range s.sandboxes {
		if sb.GetMetadata().GetUid() == uid {
			sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}
	}
}

// RemovePod removes the sandboxes and containers of the pod with uid.
func (s *Server) RemovePod(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.containers {
		if c.Labels[LabelPodUID] == uid {
			delete(s.containers, id)
		}
	}
	for id, sb := range s.sandboxes {
		if sb.GetMetadata().GetUid() == uid {
			delete(s.sandboxes, id)
		}
	}
}

// AddSandbox adds (or replaces, by ID) a sandbox as given.
func (s *Server) AddSandbox(sb *runtimeapi.PodSandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[sb.Id] = proto.Clone(sb).(*runtimeapi.PodSandbox)
}

// AddContainer adds (or replaces, by ID) a container as given.
func (s *Server) AddContainer(c *runtimeapi.Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[c.Id] = proto.Clone(c).(*runtimeapi.Container)
}

// SetContainerState sets the state of the container with id, if there is one.
func (s *Server) SetContainerState(id string, state runtimeapi.ContainerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		c.State = state
	}
}

// SetSandboxState sets the state of the sandbox with id, if there is one.
func (s *Server) SetSandboxState(id string, state runtimeapi.PodSandboxState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.State = state
	}
}

// Containers returns a copy of every container, sorted by ID.
func (s *Server) Containers() []*runtimeapi.Container {
	resp, _ := service{s: s}.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	return resp.Containers
}

// Sandboxes returns a copy of every sandbox, sorted by ID.
func (s *Server) Sandboxes() []*runtimeapi.PodSandbox {
	resp, _ := service{s: s}.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	return resp.Items
}

// RemoveSandbox removes the sandbox with id (not its containers).
func (s *Server) RemoveSandbox(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sandboxes, id)
}

// RemoveContainer removes the container with id.
func (s *Server) RemoveContainer(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.containers, id)
}

// SetDeprecations sets the deprecation warnings containerd's introspection
// API reports: id (e.g. "io.containerd.deprecation/pull-schema-1-image"),
// message and when it last occurred.
func (s *Server) SetDeprecations(ds ...Deprecation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deprecations = nil
	for _, d := range ds {
		s.deprecations = append(s.deprecations, &introspection.DeprecationWarning{ID: d.ID, Message: d.Message, LastOccurrence: timestamppb.New(d.Last)})
	}
}

// Deprecation is one deprecation warning of containerd.
type Deprecation struct {
	ID, Message string
	Last        time.Time
}

// introspectionService is containerd's introspection API, Server only.
type introspectionService struct {
	introspection.UnimplementedIntrospectionServer
	s *Server
}

// Server implements containerd's Introspection.Server.
func (v introspectionService) Server(context.Context, *emptypb.Empty) (*introspection.ServerResponse, error) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return &introspection.ServerResponse{UUID: "5f3a2b1c-fake-containerd", Pid: 812, Deprecations: v.s.deprecations}, nil
}

// service is the gRPC face of a Server; kept apart so that the CRI method
// names do not clash with the scripting methods.
type service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	s *Server
}

// Version implements the CRI.
func (service) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       "fakecri",
		RuntimeVersion:    "v0.0.0-fake",
		RuntimeApiVersion: "v1",
	}, nil
}

// Status implements the CRI: the runtime and its network are always ready.
func (service) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// ListPodSandbox implements the CRI, honouring the ID, state and label filters.
func (v service) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f, s := req.GetFilter(), v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.sandboxes {
		if f.GetId() != "" && f.GetId() != sb.Id ||
			f.GetState() != nil && f.GetState().GetState() != sb.State ||
			!hasLabels(sb.Labels, f.GetLabelSelector()) {
			continue
		}
		resp.Items = append(resp.Items, proto.Clone(sb).(*runtimeapi.PodSandbox))
	}
	sort.Slice(resp.Items, func(i, j int) bool { return resp.Items[i].Id < resp.Items[j].Id })
	return resp, nil
}

// ListContainers implements the CRI, honouring the ID, state, sandbox and
// label filters.
func (v service) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f, s := req.GetFilter(), v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range s.containers {
		if f.GetId() != "" && f.GetId() != c.Id ||
			f.GetPodSandboxId() != "" && f.GetPodSandboxId() != c.PodSandboxId ||
			f.GetState() != nil && f.GetState().GetState() != c.State ||
			!hasLabels(c.Labels, f.GetLabelSelector()) {
			continue
		}
		resp.Containers = append(resp.Containers, proto.Clone(c).(*runtimeapi.Container))
	}
	sort.Slice(resp.Containers, func(i, j int) bool { return resp.Containers[i].Id < resp.Containers[j].Id })
	return resp, nil
}

func hasLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
