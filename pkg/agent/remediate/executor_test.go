package remediate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{testenv.NodemendCRDs()}}, func(e *testenv.Env) error {
		env = e
		s := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(s); err != nil {
			return err
		}
		var err error
		k8s, err = client.New(e.Config, client.Options{Scheme: s})
		return err
	})
}

// fakeHost is a host root whose "reboot" is the hook the simulation uses:
// the boot ID file gets a new value, nothing else happens.
type fakeHost struct {
	root    string
	reboots atomic.Int32
	fail    error
}

func newFakeHost(t *testing.T, boot string) *fakeHost {
	h := &fakeHost{root: t.TempDir()}
	h.setBoot(t, boot)
	return h
}

func (h *fakeHost) setBoot(t *testing.T, boot string) {
	p := filepath.Join(h.root, BootIDPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(boot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (h *fakeHost) Mechanism() string { return "fake" }
func (h *fakeHost) Reboot(context.Context) error {
	h.reboots.Add(1)
	return h.fail
}

func startExecutor(t *testing.T, ctx context.Context, node string, h *fakeHost, mut func(*Options)) {
	t.Helper()
	opts := Options{Config: env.Config, NodeName: node, HostRoot: h.root, Rebooter: h, Log: testr.New(t)}
	if mut != nil {
		mut(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// underRepair writes the evidence an order needs on node, as the cluster
// would: the controller's repair taint, the kubelet's boot ID and a fault
// reported (KernelReady=False, the orders' trigger). Created if missing.
func underRepair(t *testing.T, node, boot string) {
	t.Helper()
	ctx := t.Context()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = []corev1.Taint{{Key: RepairTaintKey, Value: "KernelReady", Effect: corev1.TaintEffectNoSchedule}}
	if n, err = env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.BootID = boot
	n.Status.Conditions = []corev1.NodeCondition{{Type: "KernelReady", Status: corev1.ConditionFalse, Reason: "KernelDeadlock"}}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// trigger is the reason the test orders carry.
const trigger = "KernelReady=False/KernelDeadlock"

func createOrder(t *testing.T, name, node string, action v1alpha1.HostAction, boot string) *v1alpha1.NodeRemediation {
	t.Helper()
	o := &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeRemediationSpec{NodeName: node, Action: action, BootID: boot, ActiveDeadlineSeconds: 300, Reason: trigger}}
	if err := k8s.Create(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	return o
}

func waitPhase(t *testing.T, name string, want v1alpha1.RemediationPhase) *v1alpha1.NodeRemediation {
	t.Helper()
	o := &v1alpha1.NodeRemediation{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, o); err != nil {
			return false, err
		}
		return o.Status.Phase == want, nil
	})
	if err != nil {
		t.Fatalf("%s: phase %q (%s), want %q", name, o.Status.Phase, o.Status.Message, want)
	}
	return o
}

// waitReboots waits until the host has been asked to reboot want times. The
// executor writes Accepted before it touches the host (the write is what
// licenses the reboot), so the Accepted phase alone does not make the count
// final; the hook having run does.
func waitReboots(t *testing.T, h *fakeHost, want int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return h.reboots.Load() >= want, nil
	})
	if n := h.reboots.Load(); err != nil || n != want {
		t.Fatalf("%d reboots, want %d", n, want)
	}
}

// A reboot order is accepted with the boot it was made for, carried out once,
// and recorded as done by the agent of the next boot; neither a resync nor
// a restart runs it again.
func TestRebootOnceAndRecordedByTheNextBoot(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	underRepair(t, "exec-n1", "boot-1")
	ctx, stop := context.WithCancel(t.Context())
	startExecutor(t, ctx, "exec-n1", h, nil)
	createOrder(t, "reboot-1", "exec-n1", v1alpha1.HostReboot, "boot-1")
	o := waitPhase(t, "reboot-1", v1alpha1.RemediationAccepted)
	if o.Status.BootID != "boot-1" || o.Status.Mechanism != "fake" || o.Status.AcceptedTime == nil {
		t.Errorf("accepted status = %+v", o.Status)
	}
	waitReboots(t, h, 1)
	stop()

	// The host came back with a new boot; a new agent starts.
	h.setBoot(t, "boot-2")
	startExecutor(t, t.Context(), "exec-n1", h, nil)
	o = waitPhase(t, "reboot-1", v1alpha1.RemediationSucceeded)
	if o.Status.BootID != "boot-1" || o.Status.CompletedTime == nil {
		t.Errorf("final status = %+v", o.Status)
	}
	if n := h.reboots.Load(); n != 1 {
		t.Fatalf("%d reboots after the restart, want 1", n)
	}
}

// An agent restarted after accepting, on the same boot (the reboot never
// happened), does not try again: the controller escalates instead.
func TestAcceptedOrderIsNotRetriedOnTheSameBoot(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	underRepair(t, "exec-n2", "boot-1")
	ctx, stop := context.WithCancel(t.Context())
	startExecutor(t, ctx, "exec-n2", h, nil)
	createOrder(t, "reboot-2", "exec-n2", v1alpha1.HostReboot, "boot-1")
	waitPhase(t, "reboot-2", v1alpha1.RemediationAccepted)
	waitReboots(t, h, 1)
	stop()
	startExecutor(t, t.Context(), "exec-n2", h, nil)
	o := waitPhase(t, "reboot-2", v1alpha1.RemediationFailed)
	if h.reboots.Load() != 1 {
		t.Errorf("%d reboots, want 1", h.reboots.Load())
	}
	t.Log(o.Status.Message)
}

func TestRefusals(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	for _, n := range []string{"exec-n3", "exec-off", "exec-bad"} {
		underRepair(t, n, "boot-1")
	}
	startExecutor(t, t.Context(), "exec-n3", h, nil)
	startExecutor(t, t.Context(), "exec-off", h, func(o *Options) { o.Rebooter, o.RebootOff = nil, "--reboot-mechanism=none" })
	createOrder(t, "old-boot", "exec-n3", v1alpha1.HostReboot, "boot-0")
	createOrder(t, "off", "exec-off", v1alpha1.HostReboot, "boot-1")
	createOrder(t, "other-node", "exec-elsewhere", v1alpha1.HostReboot, "boot-1")
	waitPhase(t, "old-boot", v1alpha1.RemediationRefused)
	o := waitPhase(t, "off", v1alpha1.RemediationRefused)
	if o.Status.Message != "Reboot is off on this node: --reboot-mechanism=none" {
		t.Errorf("message %q", o.Status.Message)
	}
	// A failed reboot is reported failed.
	bad := newFakeHost(t, "boot-1")
	bad.fail = errors.New("systemd refused reboot.target")
	startExecutor(t, t.Context(), "exec-bad", bad, nil)
	createOrder(t, "bad", "exec-bad", v1alpha1.HostReboot, "boot-1")
	waitPhase(t, "bad", v1alpha1.RemediationFailed)

	if h.reboots.Load() != 0 {
		t.Errorf("%d reboots, want none", h.reboots.Load())
	}
	other := &v1alpha1.NodeRemediation{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: "other-node"}, other); err != nil || other.Status.Phase != "" {
		t.Errorf("another node's order: %v %+v", err, other.Status)
	}
}

// An order the agent's cache holds but the API server no longer confirms
// (deleted while the agent was cut off), or that cannot be confirmed at all
// (the API is unreachable), is not acted on.
func TestNoActionWithoutAFreshConfirmation(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	underRepair(t, "exec-n4", "boot-1")
	outage, err := testenv.NewOutage(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outage.Close() })
	e, err := New(Options{Config: outage.Config(env.Config), NodeName: "exec-n4", HostRoot: h.root, Rebooter: h, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	stale := func(name string) {
		o := &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now(), UID: "u-" + "name", ResourceVersion: "1"},
			Spec: v1alpha1.NodeRemediationSpec{NodeName: "exec-n4", Action: v1alpha1.HostReboot, BootID: "boot-1", ActiveDeadlineSeconds: 300, Reason: trigger}}
		if err := e.loop.Store().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	stale("deleted-meanwhile")
	if err := e.sync(t.Context(), "deleted-meanwhile"); err != nil {
		t.Fatal(err)
	}
	createOrder(t, "unconfirmed", "exec-n4", v1alpha1.HostReboot, "boot-1")
	stale("unconfirmed")
	outage.Down()
	if err := e.sync(t.Context(), "unconfirmed"); err == nil {
		t.Error("sync with the API down succeeded")
	}
	if h.reboots.Load() != 0 {
		t.Fatalf("%d reboots without a confirmation", h.reboots.Load())
	}
	// Back: the same order is confirmed and carried out.
	outage.Up()
	if err := e.sync(t.Context(), "unconfirmed"); err != nil {
		t.Fatal(err)
	}
	if h.reboots.Load() != 1 {
		t.Fatalf("%d reboots after the confirmation, want 1", h.reboots.Load())
	}
}

// At most one reboot per boot, however many orders arrive: a host whose
// "reboot" leaves it running the same boot (the real-node hook, or a
// reboot that has not happened yet) gets a second order for that boot
// refused as a duplicate, with an Event, and so does a third after the
// agent restarted (the ledger on the host keeps the boot).
func TestOneRebootPerBoot(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	underRepair(t, "exec-dup", "boot-1")
	var mu sync.Mutex
	var events []string
	record := func(o *Options) {
		o.Event = func(typ, reason, msg string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, typ+" "+reason+" "+msg)
		}
	}
	ctx, stop := context.WithCancel(t.Context())
	startExecutor(t, ctx, "exec-dup", h, record)
	createOrder(t, "dup-1", "exec-dup", v1alpha1.HostReboot, "boot-1")
	waitPhase(t, "dup-1", v1alpha1.RemediationAccepted)
	waitReboots(t, h, 1)
	createOrder(t, "dup-2", "exec-dup", v1alpha1.HostReboot, "boot-1")
	o := waitPhase(t, "dup-2", v1alpha1.RemediationRefused)
	if !strings.HasPrefix(o.Status.Message, DuplicatePrefix) || !strings.Contains(o.Status.Message, "order dup-1") {
		t.Errorf("second order's message %q", o.Status.Message)
	}
	stop()

	startExecutor(t, t.Context(), "exec-dup", h, record)
	createOrder(t, "dup-3", "exec-dup", v1alpha1.HostReboot, "boot-1")
	o = waitPhase(t, "dup-3", v1alpha1.RemediationRefused)
	if !strings.HasPrefix(o.Status.Message, DuplicatePrefix) {
		t.Errorf("third order's message %q", o.Status.Message)
	}
	if n := h.reboots.Load(); n != 1 {
		t.Errorf("%d reboots, want 1", n)
	}
	// The executor sends the event after it writes the phase the test
	// waited for: wait for the second one too.
	recorded := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
	_ = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return len(recorded()) >= 2, nil
	})
	if got := recorded(); len(got) != 2 || !strings.HasPrefix(got[0], "Warning "+ReasonDuplicate+" NodeRemediation dup-2 refused: duplicate:") {
		t.Errorf("events %q, want two %s", got, ReasonDuplicate)
	}
	data, err := os.ReadFile(filepath.Join(h.root, LedgerFile))
	if err != nil || !strings.HasPrefix(string(data), "boot-1 dup-1 ") {
		t.Errorf("ledger %q, %v", data, err)
	}
}

// The controller's word is not enough: an order is carried out only when
// the agent's own Node, read fresh, is under repair (the taint), reports
// the order's boot and shows the order's trigger unhealthy.
func TestOrdersNeedTheNodesEvidence(t *testing.T) {
	h := newFakeHost(t, "boot-1")
	for _, c := range []struct {
		node   string
		change func(*corev1.Node)
		reason string
		want   string
	}{
		{"ev-untainted", func(n *corev1.Node) { n.Spec.Taints = nil }, trigger, "does not carry the repair taint"},
		{"ev-other-boot", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-9" }, trigger, `the Node's status reports boot "boot-9"`},
		{"ev-healthy", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue }, trigger, "is not what the Node reports (KernelReady=True)"},
		{"ev-no-condition", func(n *corev1.Node) { n.Status.Conditions = nil }, trigger, "is not on the Node"},
		{"ev-no-trigger", nil, "", "names no trigger condition"},
		{"ev-bad-trigger", nil, "KernelReady=Broken/X", "names no trigger condition"},
	} {
		underRepair(t, c.node, "boot-1")
		if c.change != nil {
			n, err := env.Client.CoreV1().Nodes().Get(t.Context(), c.node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.change(n)
			if n, err = env.Client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.change(n)
			if _, err := env.Client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		startExecutor(t, t.Context(), c.node, h, nil)
		o := &v1alpha1.NodeRemediation{ObjectMeta: metav1.ObjectMeta{Name: c.node},
			Spec: v1alpha1.NodeRemediationSpec{NodeName: c.node, Action: v1alpha1.HostReboot, BootID: "boot-1", ActiveDeadlineSeconds: 300, Reason: c.reason}}
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		o = waitPhase(t, c.node, v1alpha1.RemediationRefused)
		if !strings.Contains(o.Status.Message, c.want) {
			t.Errorf("%s: message %q, want %q", c.node, o.Status.Message, c.want)
		}
	}
	if n := h.reboots.Load(); n != 0 {
		t.Errorf("%d reboots, want none", n)
	}
}
