//go:build e2enode

package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// journalNamespace is the journald the provenance scenario runs: a
// namespace of its own (systemd-journald NAMESPACE), so that it neither
// reads /dev/kmsg nor takes the default journal sockets, and its files are
// a directory the test removes.
const journalNamespace = "nodemend-e2e"

// journalDir is that journal's directory on the host.
func journalDir() string {
	id, _ := os.ReadFile("/etc/machine-id")
	return "/var/log/journal/" + strings.TrimSpace(string(id)) + "." + journalNamespace
}

// testProvenance writes, the way an unprivileged process or a pod can,
// lines in the words of Fatal rules — to /dev/kmsg (which only root can, and
// which the kernel then marks as user space's), and to a real journald as
// user nobody: `logger -t kubelet`, `logger -t systemd` and a native
// journal entry naming UNIT=kubelet.service — and checks that no condition
// moves while the agent counts each as rejected. Then it makes the kernel
// print its own pids line, honestly: a host cgroup the test creates with
// pids.max 1 and a shell in it that tries to fork. KernelReady turns False
// and recovers after its quiet period; the cgroup and the journal are
// removed.
func testProvenance(t *testing.T, n *node) {
	ctx := context.Background()
	n.waitCondition(ctx, t, "KernelReady", time.Minute, isStatus(corev1.ConditionTrue))
	run := time.Now().UnixNano()
	metrics := "http://" + netip.AddrPortFrom(n.layout.NodeIP, 8088).String() + "/metrics"

	// --- the journal: a journald of the test's, the agent following it.
	stop := startJournald(t)
	defer stop()
	journalLines := func() float64 { return metricSum(t, metrics, "nodemend_agent_log_lines_total", `source="journal"`) }
	deadline := time.Now().Add(2 * time.Minute) // the agent's journalctl restarts at most a minute apart
	for i := 0; journalLines() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the agent does not read the test's journal")
		}
		nobody(t, "logger", "-u", "/run/systemd/journal."+journalNamespace+"/dev-log", "-t", "probe", fmt.Sprintf("probe %d", i))
		time.Sleep(time.Second)
	}
	rejected := func(source string) float64 {
		return metricSum(t, metrics, "nodemend_agent_log_lines_rejected_total", `reason="ForkFailedOutOfPIDs"`, `source="`+source+`"`)
	}
	journal0, kmsg0 := rejected("journal"), rejected("kmsg")
	devLog := "/run/systemd/journal." + journalNamespace + "/dev-log"
	nobody(t, "logger", "-u", devLog, "-t", "kubelet",
		`E1205 10:00:00.000000    2140 mount_linux.go:282] "Mount failed" err="fork/exec /usr/bin/mount: resource temporarily unavailable"`)
	nobody(t, "logger", "-u", devLog, "-t", "systemd", "kubelet.service: Failed to fork: Resource temporarily unavailable")
	// The native protocol (a datagram of FIELD=value lines), where a sender
	// may name any UNIT it likes.
	nobody(t, "/usr/bin/python3", "-c", `import socket,sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"UNIT=kubelet.service\nSYSLOG_IDENTIFIER=systemd\nMESSAGE=containerd.service: Failed to spawn executor: Resource temporarily unavailable\n", sys.argv[1])`,
		"/run/systemd/journal."+journalNamespace+"/socket")

	// --- /dev/kmsg: root's write, with and without asking for facility 0.
	forged := fmt.Sprintf("/nodemend-e2e-forged-%d", run)
	for _, prefix := range []string{"<4>", "<0>"} {
		f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(f, "%scgroup: fork rejected by pids controller in %s\n", prefix, forged)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); rejected("journal") < journal0+3 || rejected("kmsg") < kmsg0+2; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("forged lines counted as rejected: journal %v (want %v), kmsg %v (want %v)",
				rejected("journal")-journal0, 3, rejected("kmsg")-kmsg0, 2)
		}
	}
	t.Logf("FIGURE forged lines rejected by the agent: %v from the journal, %v from /dev/kmsg", rejected("journal")-journal0, rejected("kmsg")-kmsg0)
	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range nodemendConditions {
		if c := condition(nd, ct); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("%s moved after forged lines: %+v", ct, c)
		}
	}

	// --- the kernel's own line: a fork the pids controller rejects.
	cg := fmt.Sprintf("nodemend-e2e-pids-%d", run)
	dir := filepath.Join("/sys/fs/cgroup/pids", cg)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing the test's cgroup: %v", err)
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	// The shell moves itself into the cgroup, where it is the one task
	// allowed: its fork of true fails, and the kernel says so once.
	out, _ := exec.Command("/bin/sh", "-c", "echo $$ > "+filepath.Join(dir, "cgroup.procs")+" && /bin/true").CombinedOutput()
	t.Logf("the shell in the cgroup: %s", strings.TrimSpace(string(out)))
	c, at := n.waitCondition(ctx, t, "KernelReady", time.Minute, func(c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "ForkFailedOutOfPIDs" && strings.Contains(c.Message, "/"+cg)
	})
	t.Logf("FIGURE the kernel's pids line → KernelReady=False (%s): %s", c.Reason, at.Sub(t0).Round(time.Millisecond))
	if strings.Contains(c.Message, forged) {
		t.Errorf("the condition names the forged cgroup: %s", c.Message)
	}
	_, back := n.waitCondition(ctx, t, "KernelReady", 3*time.Minute, isStatus(corev1.ConditionTrue))
	rec := back.Sub(t0)
	t.Logf("FIGURE KernelReady back to True after its 1m quiet period: %s after the line", rec.Round(time.Millisecond))
	if rec < time.Minute {
		t.Errorf("KernelReady recovered %s after the line, before its 1m quiet period", rec)
	}
}

// startJournald runs systemd-journald in journalNamespace and returns what
// stops it and removes its sockets and files.
func startJournald(t *testing.T) func() {
	t.Helper()
	cmd := exec.Command("/lib/systemd/systemd-journald", journalNamespace)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sock := "/run/systemd/journal." + journalNamespace + "/dev-log"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("journald made no socket")
		}
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, p := range []string{"/run/systemd/journal." + journalNamespace, journalDir()} {
			if err := os.RemoveAll(p); err != nil {
				t.Errorf("removing %s: %v", p, err)
			}
		}
	}
}

// nobody runs a command as user and group 65534, as an unprivileged process.
func nobody(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody: %v: %s", args[0], err, out)
	}
}

// metricSum adds the values of the agent's samples of name whose labels
// include every one of want.
func metricSum(t *testing.T, url, name string, want ...string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return sum
}
