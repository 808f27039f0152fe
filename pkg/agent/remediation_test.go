package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
	"nodemend.dev/nodemend/pkg/agent/remediate"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/monitors"
)

// The agent's side of a ladder's Reboot, on a fake host whose "reboot" is
// the simulation's hook (a new boot ID, an empty kernel log): the agent
// accepts the order and runs the hook once; the agent of the next boot
// records the order Succeeded and drops the log-derived fault of the earlier
// boot at once instead of keeping it for its quiet period.
func TestRebootOrderAndTheNextBootsAgent(t *testing.T) {
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(testenv.RepoRoot(), "deploy", "crds")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	k8s := must(crclient.New(env.Config, crclient.Options{Scheme: s}))
	ctx := context.Background()
	const node = "reboot-node"
	// The node is under repair (nodemend-controller's taint) and its
	// kubelet reports boot-1: with the agent's own fault report, the
	// evidence the agent wants before it acts on an order.
	n, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: remediate.RepairTaintKey, Value: "KernelReady", Effect: corev1.TaintEffectNoSchedule}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.BootID = "boot-1"
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := hostroot.New(t).WithProc()
	root.WriteFile(remediate.BootIDPath, "boot-1\n")
	root.AppendKmsg()
	root.AppendJournal()
	root.WriteFile("etc/nodemend/agent.yaml", fileJournal)
	// The hook is a script in the test's temporary directory, under /tmp
	// (others may write there): the program run is /bin/sh, the script its
	// argument, as an operator's command would be.
	hook := root.Path("reboot-hook.sh")
	script := "#!/bin/sh\necho boot-2 > " + root.Path(remediate.BootIDPath) + "\n: > " + root.Path("dev/kmsg") + "\necho x >> " + root.Path("reboots") + "\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	core := must(coreclient.New(env.Config))
	run := func() func() {
		a, err := New(Options{
			Client: core, NodeName: node, HostRoot: root.Path(""), ConfigPath: root.Path("etc/nodemend/agent.yaml"),
			ConfigPoll: 100 * time.Millisecond, Log: testr.New(t), Hosts: monitors.Hosts{Timex: syncedClock{}},
			Remediation: RemediationOptions{Config: env.Config, Reboot: remediate.RebootConfig{Mechanism: remediate.MechanismCommand, Command: []string{"/bin/sh", hook}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(c) }()
		return func() { cancel(); <-done }
	}
	waitNode := func(what string, cond func(*corev1.Node) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil && cond(n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	kernel := func(s corev1.ConditionStatus) func(*corev1.Node) bool {
		return func(n *corev1.Node) bool { c := condition(n, health.KernelReady); return c != nil && c.Status == s }
	}
	stop := run()
	waitNode("KernelReady True", kernel(corev1.ConditionTrue))
	root.AppendKmsg(kmsgRec(1, "cgroup: fork rejected by pids controller in /system.slice/containerd.service"))
	waitNode("KernelReady False", kernel(corev1.ConditionFalse))

	o := &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-1"},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: node, Action: v1alpha1.HostReboot, BootID: "boot-1", ActiveDeadlineSeconds: 300,
			Reason: "KernelReady=False/ForkFailedOutOfPIDs"}}
	if err := k8s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	phase := func(want v1alpha1.RemediationPhase) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err := k8s.Get(ctx, crclient.ObjectKey{Name: o.Name}, o); err == nil && o.Status.Phase == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("order phase %q (%s), want %s", o.Status.Phase, o.Status.Message, want)
			}
		}
	}
	phase(v1alpha1.RemediationAccepted)
	waitFile := func() string {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if b, _ := os.ReadFile(root.Path("reboots")); len(b) > 0 {
				return string(b)
			}
		}
		return ""
	}
	if got := waitFile(); got != "x\n" {
		t.Fatalf("hook ran %q, want once", got)
	}
	stop()

	// The next boot: the kubelet would write the new boot ID; the agent
	// starts again.
	stop = run()
	defer stop()
	phase(v1alpha1.RemediationSucceeded)
	if !strings.Contains(o.Status.Message, "boot boot-1, now boot boot-2") {
		t.Errorf("message %q", o.Status.Message)
	}
	waitNode("KernelReady True at once after the reboot", kernel(corev1.ConditionTrue))
	if b, _ := os.ReadFile(root.Path("reboots")); string(b) != "x\n" {
		t.Errorf("hook ran %q, want once", b)
	}
	if b, _ := os.ReadFile(root.Path(ConditionsBootFile)); strings.TrimSpace(string(b)) != "boot-2" {
		t.Errorf("recorded boot %q", b)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
