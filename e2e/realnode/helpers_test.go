//go:build e2enode

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/realnode"
)

// nodemendConditions are the four a CPU node carries; kubeletConditions
// the kubelet's own.
var (
	nodemendConditions = []corev1.NodeConditionType{"KernelReady", "ContainerRuntimeReady", "NetworkingReady", "StorageReady"}
	kubeletConditions  = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}
)

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitCondition polls the node until its condition t satisfies ok, and
// returns it with the time it was first seen so.
func (n *node) waitCondition(ctx context.Context, t *testing.T, ct corev1.NodeConditionType, within time.Duration, ok func(*corev1.NodeCondition) bool) (*corev1.NodeCondition, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *corev1.NodeCondition
	for {
		nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
		if err == nil {
			if c := condition(nd, ct); c != nil {
				last = c
				if ok(c) {
					return c, time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not reach the expected state in %s; last: %+v", ct, within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func isStatus(s corev1.ConditionStatus) func(*corev1.NodeCondition) bool {
	return func(c *corev1.NodeCondition) bool { return c.Status == s }
}

// pods lists the running pods of a label selector in nodemend's namespace.
func (n *node) pods(ctx context.Context, t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (n *node) agentPod(ctx context.Context, t *testing.T) corev1.Pod {
	t.Helper()
	ps := n.pods(ctx, t, realnode.Namespace, "app.kubernetes.io/name=nodemend-agent")
	if len(ps) != 1 {
		t.Fatalf("want one agent pod, have %d", len(ps))
	}
	return ps[0]
}

// containerCgroup is a container's cgroup directory in a v1 hierarchy:
// <cgroupRoot>/kubepods[/<qos>]/pod<uid>/<container id>, as the kubelet
// with the cgroupfs driver lays it out.
func (n *node) containerCgroup(t *testing.T, hierarchy string, pod corev1.Pod, container string) string {
	t.Helper()
	var id string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			id = cs.ContainerID[strings.Index(cs.ContainerID, "://")+3:]
		}
	}
	if id == "" {
		t.Fatalf("pod %s has no container %s running", pod.Name, container)
	}
	base := filepath.Join("/sys/fs/cgroup", hierarchy, n.layout.CgroupRoot, "kubepods")
	for _, qos := range []string{"", "burstable", "besteffort"} {
		p := filepath.Join(base, qos, "pod"+string(pod.UID), id)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no %s cgroup for container %s of pod %s under %s", hierarchy, id, pod.Name, base)
	return ""
}

// readInt reads a cgroup file holding one number.
func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// statField reads one "key value" line of a cgroup v1 stat file.
func statField(t *testing.T, path, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	t.Fatalf("%s has no %s", path, key)
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
