//go:build e2enode

package realnode

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/realnode"
)

func execOut(name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: errb.Bytes()}
	}
	return out.String(), nil
}

// testMendLogs runs kubectl mend logs against the node: the API server's
// node proxy reaches the real kubelet's /logs/, which serves the bundle the
// agent wrote. A log file the test plants holds secrets in the forms
// redaction must catch.
func testMendLogs(t *testing.T, n *node) {
	ctx := context.Background()
	canary := "nmnode-canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	planted := "/var/log/nodemend-e2e.log"
	jwt := "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6" + canary + "In0.c2lnbmF0dXJlLXRoYXQtaXMtbG9uZy1lbm91Z2g"
	secretLines := "level=info msg=\"login\" password=" + canary + "-pw\n" +
		"Authorization: Bearer " + jwt + "\n" +
		"aws_secret_access_key = " + canary + "wJalrXUtnFEMIK7MDENGbPxRfiCY\n"
	if err := os.WriteFile(planted, []byte("nodemend e2e "+canary+" marker\n"+secretLines), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(planted) })

	mend := filepath.Join(n.repo, "bin", "kubectl-mend")
	out := t.TempDir()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, mend, "logs", n.layout.NodeName, "--kubeconfig", n.layout.Admin(), "-o", out, "--fresh")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl mend logs: %v\n%s", err, b)
	}
	t.Logf("FIGURE kubectl mend logs (request → bundle downloaded through the kubelet's /logs/): %.1fs", time.Since(t0).Seconds())
	bundles, _ := filepath.Glob(filepath.Join(out, n.layout.NodeName, "*.tar.gz"))
	if len(bundles) != 1 {
		t.Fatalf("want one bundle in %s, have %v; output:\n%s", out, bundles, b)
	}
	bf, err := os.Open(bundles[0])
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	files := diagtest.Untar(t, bf)
	var all strings.Builder
	names := make([]string, 0, len(files))
	for name, data := range files {
		names = append(names, name)
		all.WriteString(name + "\n" + data + "\n")
	}
	text := all.String()
	st, _ := os.Stat(bundles[0])
	t.Logf("FIGURE bundle: %d files, %d bytes", len(files), st.Size())

	// This node's real facts: the runtime's own version over CRI, the
	// kubelet's process with its flags, the kernel's log with the line the
	// provenance scenario provoked (the kernel's own pids line).
	want := map[string]*regexp.Regexp{
		"containerd's CRI version":    regexp.MustCompile(`"runtimeName":\s*"containerd"`),
		"the kubelet's process":       regexp.MustCompile(`kubelet --config=` + regexp.QuoteMeta(filepath.Join(n.layout.State, "conf", "kubelet.yaml"))),
		"the kubelet's configuration": regexp.MustCompile(`nodeStatusReportFrequency: 10s`),
		"the kernel log":              regexp.MustCompile(`fork rejected by pids controller in /nodemend-e2e-pids-\d+`),
		"the planted log file":        regexp.MustCompile(regexp.QuoteMeta(canary) + ` marker`),
		// The agent's cloud metadata service is AWS's mock on loopback.
		"the instance's metadata": regexp.MustCompile(`cloud/aws/meta-data/instance-id\ni-[0-9a-f]+`),
	}
	for what, re := range want {
		if !re.MatchString(text) {
			t.Errorf("the bundle lacks %s (%s); files: %s", what, re, strings.Join(names, " "))
		}
	}
	// Redaction: no planted secret, no private key of this node, no token.
	for _, secret := range []string{canary + "-pw", jwt, canary + "wJalrXUtnFEMIK7MDENGbPxRfiCY"} {
		if strings.Contains(text, secret) {
			t.Errorf("the bundle holds the planted secret %q", secret)
		}
	}
	if regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----\s*\n[A-Za-z0-9+/=]{20,}`).MatchString(text) {
		t.Error("the bundle holds a private key")
	}
	keys, _ := filepath.Glob(filepath.Join(n.layout.State, "pki", "*.key"))
	for _, k := range keys {
		data, _ := os.ReadFile(k)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 2 && strings.Contains(text, lines[1]) {
			t.Errorf("the bundle holds the key material of %s", k)
		}
	}
	if m := regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`).FindString(text); m != "" {
		t.Errorf("the bundle holds a JSON web token: %.40s…", m)
	}
}

var repairPolicyGVR = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderepairpolicies"}

// testRepair runs a repair of the live node with a policy whose toleration
// is seconds: the networking fault persists (the test's link stays down),
// the controller taints, drains a Deployment under a PodDisruptionBudget —
// the kubelet really stops its containers — and hands the node to the
// plain node backend, which deletes the Node object. The machine is then
// orphaned: the kubelet runs on and does not register again.
func testRepair(t *testing.T, n *node) {
	ctx := context.Background()
	imgs, err := n.layout.LoadImages()
	if err != nil || imgs.Workload == "" {
		t.Fatalf("no test workload image (make images builds one): %v", err)
	}
	const ns = "e2e-workload"
	if _, err := n.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "e2e-workload"}
	replicas := int32(2)
	grace := int64(5)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "workload", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
					Name: "workload", Image: imgs.Workload, ImagePullPolicy: corev1.PullNever}}}}}}
	if _, err := n.client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "workload", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := n.client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running []corev1.Pod
	deadline := time.Now().Add(2 * time.Minute)
	for len(running) < 2 {
		running = running[:0]
		for _, p := range n.pods(ctx, t, ns, "app=e2e-workload") {
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload did not run in 2m")
		}
		time.Sleep(500 * time.Millisecond)
	}
	containers := map[string]bool{}
	for _, p := range running {
		containers[p.Status.ContainerStatuses[0].ContainerID] = true
	}

	policy := `apiVersion: nodemend.dev/v1alpha1
kind: NodeRepairPolicy
metadata:
  name: e2e-real-node
spec:
  nodeSelector:
    matchLabels: {kubernetes.io/hostname: ` + n.layout.NodeName + `}
  weight: 100
  maxUnhealthy: "100%"
  rules:
  - {conditionType: NetworkingReady, status: "False", toleration: 10s}
  drain:
    mode: Evict
    deadline: 30s
  action: Replace
`
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(policy), &u.Object); err != nil {
		t.Fatal(err)
	}
	dyn := n.dynamic(t)
	if _, err := dyn.Resource(repairPolicyGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	link := createTestLink(t)
	t.Cleanup(deleteTestLink)
	n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionTrue))
	time.Sleep(5 * time.Second)
	t0 := time.Now()
	if err := netlink.LinkSetDown(link); err != nil {
		t.Fatal(err)
	}
	_, faulty := n.waitCondition(ctx, t, "NetworkingReady", time.Minute, isStatus(corev1.ConditionFalse))
	t.Logf("FIGURE repair: fault → NetworkingReady=False %s", faulty.Sub(t0).Round(time.Millisecond))

	// Taint, then the drain: the first workload pod is evicted, the PDB
	// holds the second (its replacement cannot schedule on the tainted
	// node) until the drain deadline.
	var tainted, firstGone, allGone, nodeGone time.Time
	evictedEarly := false
	deadline = time.Now().Add(4 * time.Minute)
	for nodeGone.IsZero() {
		nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			nodeGone = time.Now()
		case err == nil && tainted.IsZero():
			for _, tn := range nd.Spec.Taints {
				if strings.HasPrefix(tn.Key, "nodemend.dev/") {
					tainted = time.Now()
				}
			}
		}
		if nodeGone.IsZero() {
			for _, p := range n.pods(ctx, t, realnode.Namespace, "app.kubernetes.io/name=nodemend-controller") {
				if p.DeletionTimestamp != nil {
					n.controllersEvicted = true
				}
			}
		}
		left := 0
		for _, p := range n.pods(ctx, t, ns, "app=e2e-workload") {
			if len(p.Status.ContainerStatuses) > 0 && containers[p.Status.ContainerStatuses[0].ContainerID] && p.DeletionTimestamp == nil {
				left++
			}
		}
		if left < 2 && firstGone.IsZero() {
			firstGone = time.Now()
		}
		if left == 0 && allGone.IsZero() {
			allGone = time.Now()
			if allGone.Sub(firstGone) < 20*time.Second {
				evictedEarly = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the repair did not delete the node in 4m (tainted %v, first pod gone %v, all gone %v)", !tainted.IsZero(), !firstGone.IsZero(), !allGone.IsZero())
		}
		time.Sleep(250 * time.Millisecond)
	}
	since := func(x time.Time) string {
		if x.IsZero() {
			return "never seen"
		}
		return x.Sub(faulty).Round(100 * time.Millisecond).String()
	}
	t.Logf("FIGURE repair after NetworkingReady=False: tainted %s, first workload pod gone %s, last gone %s, Node deleted %s",
		since(tainted), since(firstGone), since(allGone), since(nodeGone))
	if tainted.IsZero() || firstGone.IsZero() {
		t.Errorf("the repair skipped the taint or the drain")
	}
	if evictedEarly {
		t.Errorf("both workload pods left within 20s: the PodDisruptionBudget did not hold the second until the drain deadline")
	}
	// The controller's replicas tolerate the repair taint: they were not
	// drained, and ran until the hand-over (they go with the Node).
	if n.controllersEvicted {
		t.Error("the drain evicted a nodemend-controller replica (it tolerates the repair taint and must stay until the hand-over)")
	}
	// The kubelet stopped the workload's containers for real.
	if left := n.runningContainers(t, containers); len(left) > 0 {
		t.Errorf("containers of drained pods still run: %v", left)
	}
	// What happens to the live node: it is orphaned. The kubelet runs on
	// and does not register again; its pods are garbage-collected.
	if n.layout.Daemon("kubelet") == 0 {
		t.Error("the kubelet stopped")
	}
	time.Sleep(30 * time.Second)
	if _, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Node came back (err %v): the kubelet registered again", err)
	}
	t.Logf("FIGURE repair: the Node object is gone, the kubelet (pid %d) still runs and has not registered again in 30s: the machine is orphaned", n.layout.Daemon("kubelet"))
}

// runningContainers lists which of ids the runtime still runs.
func (n *node) runningContainers(t *testing.T, ids map[string]bool) []string {
	t.Helper()
	out, err := execOut("ctr", "--address", n.layout.CRISocket(), "--namespace", "k8s.io", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for id := range ids {
		short := id[strings.Index(id, "://")+3:]
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == short && f[2] == "RUNNING" {
				left = append(left, short)
			}
		}
	}
	return left
}

func testStopLeavesNoTrace(t *testing.T, n *node) {
	deleteTestLink()
	t0 := time.Now()
	if _, err := n.script(context.Background(), "stop"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE stop: %.1fs", time.Since(t0).Seconds())
	n.assertNoTrace(t)
}

func (n *node) assertNoTrace(t *testing.T) {
	t.Helper()
	after, err := realnode.TakeTrace(n.layout.Ports)
	if err != nil {
		t.Fatal(err)
	}
	if d := realnode.Diff(n.before, after); len(d) > 0 {
		t.Errorf("the machine differs from before start:\n%s", strings.Join(d, "\n"))
	}
	if lines, running := n.layout.Status(); running || strings.Contains(strings.Join(lines, "\n"), "running") {
		t.Errorf("something still runs:\n%s", strings.Join(lines, "\n"))
	}
}

// testSecondStart starts the node again (without the chart: the first
// start proved it) and stops it: state from the first run is no obstacle.
func testSecondStart(t *testing.T, n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	if _, err := n.script(ctx, "start", "--no-chart"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE second start (node Ready, no chart): %.1fs", time.Since(t0).Seconds())
	c, err := n.layout.Client()
	if err != nil {
		t.Fatal(err)
	}
	nd, err := c.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil || condition(nd, corev1.NodeReady) == nil || condition(nd, corev1.NodeReady).Status != corev1.ConditionTrue {
		t.Errorf("after the second start the node is not Ready: %v", err)
	}
	if _, err := n.script(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	n.assertNoTrace(t)
}

// testBadInput: each bad input gets an error that says what to do, and
// leaves nothing running and no trace.
func testBadInput(t *testing.T, n *node) {
	ctx := context.Background()
	// check starts the node expecting a refusal that says want; release
	// undoes what the case set up (its own listener) before the machine is
	// compared with before start.
	check := func(t *testing.T, env []string, release func(), want ...string) {
		t.Helper()
		_, err := n.scriptEnv(ctx, env, "start", "--no-chart")
		if err == nil {
			_, _ = n.script(ctx, "stop")
			t.Fatal("start succeeded")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error does not say %q:\n%v", w, err)
			}
		}
		if release != nil {
			release()
		}
		n.assertNoTrace(t)
	}
	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(n.layout.Ports.APIServer))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		check(t, nil, func() { _ = ln.Close() }, "port "+strconv.Itoa(n.layout.Ports.APIServer)+" (kube-apiserver) is in use", "NODEMEND_NODE_PORT_BASE")
	})
	t.Run("stale state", func(t *testing.T) {
		pids := filepath.Join(n.layout.State, "pids")
		if err := os.MkdirAll(pids, 0o755); err != nil {
			t.Fatal(err)
		}
		// A PID file of a node whose processes died with the machine.
		if err := os.WriteFile(filepath.Join(pids, "kubelet.json"), []byte(`{"name":"kubelet","pid":999999,"startTicks":1,"bin":"kubelet"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		check(t, nil, nil, "was not stopped", "hack/real-node.sh stop")
		if _, err := n.script(ctx, "stop"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(pids, "kubelet.json")); err == nil {
			t.Error("stop left the stale PID file")
		}
	})
	t.Run("missing package", func(t *testing.T) {
		// A PATH where everything is found but containerd's commands.
		dir := t.TempDir()
		for _, d := range []string{"/usr/local/go/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "containerd") || e.Name() == "ctr" {
					continue
				}
				_ = os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name()))
			}
		}
		check(t, []string{"PATH=" + dir}, nil, "missing containerd", "apt-get install containerd")
	})
}

var remediationGVR = schema.GroupVersionResource{Group: "nodemend.dev", Version: "v1alpha1", Resource: "noderemediations"}

// testRebootHook checks the agent's reboot setup, and that it carries out
// no order on the controller's word alone: the node is this machine, so
// the chart values start installs point the reboot mechanism at a hook
// (realnode.RebootHook); an order for the node while it is not under
// repair (no repair taint, no fault reported) is refused, and the hook does
// not run. The ladder's step runs it, for an order the node's state backs.
func testRebootHook(t *testing.T, n *node) {
	ctx := context.Background()
	if _, err := os.Stat(realnode.RebootHook); err == nil {
		t.Fatalf("%s exists before any order", realnode.RebootHook)
	}
	args := strings.Join(n.agentPod(ctx, t).Spec.Containers[0].Args, " ")
	for _, want := range []string{"--reboot-mechanism=command", "--reboot-command=/usr/bin/touch,/host" + realnode.RebootHook, "--accelerator-reset=false"} {
		if !strings.Contains(args, want) {
			t.Errorf("the agent runs without %s: %s", want, args)
		}
	}
	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.layout.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boot := nd.Status.NodeInfo.BootID
	dyn := n.dynamic(t)
	order := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemend.dev/v1alpha1", "kind": "NodeRemediation",
		"metadata": map[string]any{"name": "e2e-reboot-unbacked"},
		"spec": map[string]any{"nodeName": n.layout.NodeName, "action": "Reboot", "bootID": boot,
			"reason": "KernelReady=False/KernelDeadlock", "activeDeadlineSeconds": int64(120)},
	}}
	t0 := time.Now()
	if _, err := dyn.Resource(remediationGVR).Create(ctx, order, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(remediationGVR).Delete(context.Background(), "e2e-reboot-unbacked", metav1.DeleteOptions{})
	})
	var phase, message string
	for deadline := time.Now().Add(time.Minute); phase == ""; time.Sleep(200 * time.Millisecond) {
		got, err := dyn.Resource(remediationGVR).Get(ctx, "e2e-reboot-unbacked", metav1.GetOptions{})
		if err == nil {
			phase, _, _ = unstructured.NestedString(got.Object, "status", "phase")
			message, _, _ = unstructured.NestedString(got.Object, "status", "message")
		}
		if phase == "" && time.Now().After(deadline) {
			t.Fatal("the agent did not answer the order in 1m")
		}
	}
	t.Logf("FIGURE reboot order → answered: %.1fs", time.Since(t0).Seconds())
	if phase != "Refused" || !strings.Contains(message, "does not carry the repair taint") {
		t.Errorf("an order for a node not under repair: %s %q, want Refused for want of the repair taint", phase, message)
	}
	if _, err := os.Stat(realnode.RebootHook); err == nil {
		t.Errorf("the hook ran for an order the node's state does not back")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err != nil || strings.TrimSpace(string(b)) != boot {
		t.Errorf("the machine's boot changed (%q, was %q): %v", b, boot, err)
	}
}

// dynamic is a client for nodemend's custom resources, as the admin.
func (n *node) dynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", n.layout.Admin())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}
