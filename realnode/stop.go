package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stop stops what start started and puts the machine back as start found
// it: every pod sandbox removed through the runtime (the CNI plugins then
// delete their veths and addresses), the daemons stopped, leftover mounts
// under the node's directories unmounted, iptables chains, links and
// cgroups removed, sysctls and / propagation restored, the directories
// start created deleted. It does as much as it can and reports every
// failure; a second stop finds nothing to do. Logs stay under State.
func (l Layout) Stop() error {
	f, haveFound, err := l.loadFound()
	if err != nil {
		return err
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	stop := func(name string, grace time.Duration) {
		d, ok, err := l.recorded(name)
		add(err)
		if ok {
			d.stop(grace)
		}
	}
	// The kubelet first, so that it does not restart what is removed next.
	stop("kubelet", 20*time.Second)
	stop("kube-proxy", 10*time.Second)
	if kp := l.binaryOf("kube-proxy"); kp != "" {
		if out, err := exec.Command(kp, "--cleanup", "--config="+l.conf("kube-proxy.yaml")).CombinedOutput(); err != nil {
			add(fmt.Errorf("kube-proxy --cleanup: %v: %s", err, lastLines(string(out), 5)))
		}
	}
	if d, ok, _ := l.recorded("containerd"); !ok || !d.alive() {
		// Sandboxes left by a containerd that died: a fresh one removes them.
		if _, err := os.Stat(l.conf("containerd.toml")); err == nil && haveFound {
			add(l.StartContainerd(context.Background()))
		}
	}
	add(l.removeSandboxes())
	stop("containerd", 20*time.Second)
	// The shims of this node (their command line names its socket) and
	// the containers they still hold.
	for _, pid := range pidsWithArg(l.CRISocket()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, n := range []string{"ec2-metadata-mock", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		stop(n, 15*time.Second)
	}
	// Mounts: pod volumes, the kubelet's root bind mount, sandbox shm,
	// container rootfs, network namespace files.
	add(unmountUnder(l.Var, l.Run, "/run/containerd"))
	add(removeCNINetns())
	add(removeIPTablesResidue())
	add(l.tearDownNetwork())
	add(l.removeCgroups())
	if haveFound {
		add(restoreSysctls(f, changedSysctls()))
		if f.RootPrivate {
			add(restorePropagation(f))
		}
		for _, p := range f.Absent {
			add(os.RemoveAll(p))
		}
	}
	for _, d := range []string{l.Var, l.Run} {
		add(os.RemoveAll(d))
	}
	if len(errs) == 0 {
		_ = os.RemoveAll(l.pidDir())
		_ = os.Remove(l.foundFile())
	}
	return errors.Join(errs...)
}

// binaryOf is the binary a daemon was started from (kube-proxy --cleanup
// runs the same build).
func (l Layout) binaryOf(name string) string {
	d, ok, _ := l.recorded(name)
	if !ok {
		return ""
	}
	return d.Bin
}

// removeSandboxes stops and removes every pod sandbox through the CRI, as
// the kubelet would: the runtime tears down each pod's network (CNI DEL)
// and mounts.
func (l Layout) removeSandboxes() error {
	if _, err := os.Stat(l.CRISocket()); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///cri", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", l.CRISocket())
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if status.Code(err) == codes.Unimplemented {
		return nil // containerd without its CRI plugin never ran a pod
	}
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox %s (%s/%s): %w", s.Id, s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", s.Id, err))
		}
	}
	return errors.Join(errs...)
}

// removeCNINetns unmounts and removes the network namespace files that
// containerd names cni-<uuid> under /run/netns and that a removed sandbox
// left (none, when every sandbox was removed); nothing else there is
// touched.
func removeCNINetns() error {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cni-") {
			continue
		}
		p := filepath.Join("/run/netns", e.Name())
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Status is one line per daemon; running is true when all run.
func (l Layout) Status() (lines []string, running bool) {
	running = true
	for _, n := range daemonNames() {
		d, ok, err := l.recorded(n)
		switch {
		case err != nil:
			lines, running = append(lines, fmt.Sprintf("%s: unreadable PID file: %v", n, err)), false
		case ok && d.alive():
			lines = append(lines, fmt.Sprintf("%s: running (pid %d)", n, d.Pid))
		case ok:
			lines, running = append(lines, fmt.Sprintf("%s: exited (pid %d); see %s", n, d.Pid, filepath.Join(l.LogDir(), n+".log"))), false
		case optionalDaemon(n):
			// not started: this node has no metadata service
		default:
			lines, running = append(lines, n+": stopped"), false
		}
	}
	return lines, running
}

// restorePropagation undoes start's `mount --make-rshared /`
// (propagationRestore); a found record of an older start, without the
// table, gets the bare rprivate it was written for.
func restorePropagation(f found) error {
	if out, err := exec.Command("mount", "--make-rprivate", "/").CombinedOutput(); err != nil {
		return fmt.Errorf("mount --make-rprivate /: %v: %s", err, out)
	}
	changes, lost := propagationRestore(f.Propagation)
	var errs []error
	for _, c := range changes {
		flag := uintptr(syscall.MS_SHARED)
		if c.Kind == "unbindable" {
			flag = syscall.MS_UNBINDABLE
		}
		if err := syscall.Mount("", c.Path, "", flag, ""); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("making %s %s again: %w", c.Path, c.Kind, err))
		}
	}
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("mounts that were slaves before start are private now (a slave's master cannot be restored): %s", strings.Join(lost, ", ")))
	}
	return errors.Join(errs...)
}
