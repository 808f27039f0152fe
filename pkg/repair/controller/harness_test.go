package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/apigate"
	"nodemend.dev/nodemend/internal/testsupport/repairtest"
	"nodemend.dev/nodemend/pkg/repair/controller"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// One real kube-apiserver + etcd for the package, with the NodeRepairPolicy,
// Karpenter and Cluster API CRDs. Tests run one at a time (they share the
// cluster-wide node population that the gates count) and remove their nodes
// when they end.
var (
	restCfg   *rest.Config
	k8s       client.Client
	clientset kubernetes.Interface
)

func TestMain(m *testing.M) {
	env, err := repairtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	restCfg, clientset = env.Config, env.Client
	k8s, err = client.New(env.Config, client.Options{Scheme: repairtest.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// harness runs one repair controller with a fake clock.
type harness struct {
	t     *testing.T
	ctx   context.Context
	clock *clocktesting.FakeClock
	t0    time.Time
	ns    string
	reg   *prometheus.Registry
	opts  controller.Options
	stop  func()
}

var nsSeq int

// start runs a controller (leader election off: one replica) in a fresh
// namespace, which holds its pause ConfigMap.
func start(t *testing.T, mutate ...func(*controller.Options)) *harness {
	t.Helper()
	h := newHarness(t, mutate...)
	m := h.manager(managerSpec{cfg: restCfg, log: testr.NewWithOptions(t, testr.Options{Verbosity: 0})})
	h.reg = m.reg
	h.stop = m.stop
	return h
}

// newHarness prepares a namespace and a fake clock; no controller runs yet.
func newHarness(t *testing.T, mutate ...func(*controller.Options)) *harness {
	t.Helper()
	nsSeq++
	t0 := time.Now().UTC().Truncate(time.Second)
	h := &harness{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(t0), t0: t0, ns: fmt.Sprintf("nodemend-%d", nsSeq), stop: func() {}}
	if err := repairtest.Namespace(h.ctx, k8s, h.ns); err != nil {
		t.Fatal(err)
	}
	h.opts = controller.Options{
		Clock: h.clock, Namespace: h.ns, PauseConfigMap: "nodemend-pause",
		SkipNameValidation: true, DrainPollInterval: 10 * time.Second,
		// The tests written before the ladder repair plain nodes by
		// replacement; the ladder's tests turn it off (withLadder).
		ReplaceUnowned: true,
		// The tests' agents write their conditions once, where a real one
		// heartbeats every 5 minutes: only the dead-node tests
		// (deadnode_test.go) judge its silence.
		AgentSilence: -1,
	}
	for _, m := range mutate {
		m(&h.opts)
	}
	t.Cleanup(h.cleanup)
	return h
}

// managerSpec varies the controllers a test runs.
type managerSpec struct {
	cfg            *rest.Config
	log            logr.Logger
	leaderElection bool
	// gate, if set, holds the manager's requests through outages.
	gate *apigate.Gate
	// direct keeps the controller from running: another holder has the
	// leader Lease, so the manager's cache syncs but its controller never
	// starts, and the test calls Reconcile itself (reconcileNow).
	direct bool
}

// running is one controller process, as far as a test is concerned.
type running struct {
	reg *prometheus.Registry
	rec *controller.Reconciler
	// cache reads the manager's cache, as the reconciler does.
	cache client.Reader
	// cancel stops the manager without waiting; stop waits for it.
	cancel, stop func()
	done         chan struct{}
}

// manager starts a manager running the repair controller with h.opts.
func (h *harness) manager(spec managerSpec) *running {
	h.t.Helper()
	mo := controller.ManagerOptions{
		Logger: spec.log, Namespace: h.ns, PauseConfigMap: h.opts.PauseConfigMap, MetricsAddr: "0", HealthAddr: "0",
		LeaderElection: spec.leaderElection, Gate: spec.gate,
	}
	if spec.direct {
		mo.LeaderElection = true
		holdLease(h.t, h.ns)
	}
	if spec.leaderElection {
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = 3*time.Second, 2*time.Second, 100*time.Millisecond
	}
	mgr, err := controller.NewManager(spec.cfg, mo)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &running{reg: prometheus.NewRegistry(), done: make(chan struct{})}
	opts := h.opts
	opts.Registerer = r.reg
	opts.NewQueue = fakeClockQueue(h.clock)
	ctx, cancel := context.WithCancel(h.ctx)
	rec, err := controller.Setup(ctx, mgr, opts)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	r.rec, r.cache = rec, mgr.GetClient()
	go func() {
		defer close(r.done)
		if err := mgr.Start(ctx); err != nil {
			h.t.Errorf("manager: %v", err)
		}
	}()
	r.cancel = cancel
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-r.done }) }
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		h.t.Fatal("cache did not sync")
	}
	return r
}

// holdLease takes the repair controller's leader Lease in ns for another
// holder, for an hour: a manager there syncs its cache and never leads.
func holdLease(t *testing.T, ns string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodemend-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("another-replica"), LeaseDurationSeconds: ptr(int32(3600)),
			AcquireTime: &now, RenewTime: &now}}
	if err := k8s.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
}

// reconcileNow calls m's Reconcile for node once m's cache holds the node
// as the API server has it (or has seen it gone), as a queued reconcile
// would after the write that queued it.
func (h *harness) reconcileNow(m *running, node string) reconcile.Result {
	h.t.Helper()
	res, err := h.tryReconcile(m, node)
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", node, err)
	}
	return res
}

func (h *harness) tryReconcile(m *running, node string) (reconcile.Result, error) {
	h.t.Helper()
	h.eventually("the cache holds "+node+" as the API server does", func() bool {
		want, cached := &corev1.Node{}, &corev1.Node{}
		errWant := k8s.Get(h.ctx, client.ObjectKey{Name: node}, want)
		errCached := m.cache.Get(h.ctx, client.ObjectKey{Name: node}, cached)
		if apierrors.IsNotFound(errWant) {
			return apierrors.IsNotFound(errCached)
		}
		return errWant == nil && errCached == nil && want.ResourceVersion == cached.ResourceVersion
	})
	ctx := logr.NewContext(h.ctx, testr.NewWithOptions(h.t, testr.Options{Verbosity: 0}))
	return m.rec.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
}

// fakeClockQueue builds the controller's work queue for these tests: the
// reconciler's RequeueAfter waits on the test's fake clock, as the
// production queue waits on the real one, while the rate limiter's retries
// of a failed reconcile wait real time (an API server's outage or a stale
// cache in a test is real). Both feed one queue.
func fakeClockQueue(clk clock.WithTicker) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(_ string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{})
		retries := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Queue: base})
		return &twoClockQueue{
			TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
				workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{DelayingQueue: retries}),
			requeues: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Queue: base, Clock: clk}),
		}
	}
}

// twoClockQueue is a rate-limiting queue whose AddAfter (RequeueAfter)
// waits on another clock than its AddRateLimited.
type twoClockQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	requeues workqueue.TypedDelayingInterface[reconcile.Request]
}

func (q *twoClockQueue) AddAfter(item reconcile.Request, d time.Duration) {
	q.requeues.AddAfter(item, d)
}

func (q *twoClockQueue) ShutDown() {
	q.TypedRateLimitingInterface.ShutDown()
	q.requeues.ShutDown()
}

func (q *twoClockQueue) ShutDownWithDrain() {
	q.TypedRateLimitingInterface.ShutDownWithDrain()
	q.requeues.ShutDown()
}

func (h *harness) cleanup() {
	h.stop()
	ctx := context.Background()
	_ = k8s.DeleteAllOf(ctx, &corev1.Node{})
	_ = k8s.DeleteAllOf(ctx, &v1alpha1.NodeRepairPolicy{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes := &corev1.NodeList{}
		if err := k8s.List(ctx, nodes); err == nil && len(nodes.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Errorf("nodes left behind")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node creates a healthy node.
func (h *harness) node(name string, opts ...repairtest.NodeOpt) {
	h.t.Helper()
	if _, err := repairtest.Node(h.ctx, k8s, name, h.clock.Now(), opts...); err != nil {
		h.t.Fatal(err)
	}
}

// fault sets a condition, as an agent or the kubelet would, with its
// LastTransitionTime.
func (h *harness) fault(name string, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string, ltt time.Time) {
	h.t.Helper()
	if err := repairtest.SetCondition(h.ctx, k8s, name, repairtest.Condition(typ, status, reason, ltt)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) heal(name string, typ corev1.NodeConditionType) {
	h.t.Helper()
	h.fault(name, typ, corev1.ConditionTrue, string(typ)+"IsReady", h.clock.Now())
}

// recover heals a node's only fault and waits until the controller has seen
// it (its record is cleared), so that the next clock step is judged on the
// healed state.
func (h *harness) recover(name string, typ corev1.NodeConditionType) {
	h.t.Helper()
	h.heal(name, typ)
	h.eventually(name+" seen healthy", func() bool { return h.since(name) == "" })
}

// advanceTo moves the fake clock (never backwards).
func (h *harness) advanceTo(t time.Time) {
	if t.After(h.clock.Now()) {
		h.clock.SetTime(t)
	}
}

func (h *harness) advance(d time.Duration) { h.clock.Step(d) }

func (h *harness) get(name string) *corev1.Node {
	h.t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// consistently checks cond for a while: for the absence of an action.
func (h *harness) consistently(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if !cond() {
			h.t.Fatalf("expected %s to hold", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) tainted(name string) bool {
	n := h.get(name)
	return n != nil && record.HasTaint(n)
}

func (h *harness) phase(name string) string {
	n := h.get(name)
	if n == nil {
		return "gone"
	}
	return string(h.state(n).Phase)
}

// record is the node's repair state (the zero state when it is gone).
func (h *harness) record(name string) record.State {
	n := h.get(name)
	if n == nil {
		return record.State{}
	}
	return h.state(n)
}

func (h *harness) state(n *corev1.Node) record.State {
	h.t.Helper()
	st, err := record.Read(n)
	if err != nil {
		h.t.Fatalf("%s: %v", n.Name, err)
	}
	return st
}

func (h *harness) gone(name string) bool { return h.get(name) == nil }

func (h *harness) since(name string) string {
	n := h.get(name)
	if n == nil {
		return ""
	}
	return h.state(n).Since.String()
}

// untouched: no taint, no repair phase, still there.
func (h *harness) untouched(name string) bool {
	n := h.get(name)
	return n != nil && !record.HasTaint(n) && !record.InRepair(n)
}

func (h *harness) waitRecorded(name string) {
	h.t.Helper()
	h.eventually(name+" has its unhealthy-since record", func() bool { return h.since(name) != "" })
}

// events lists the events with reason about the object called name.
func (h *harness) events(name, reason string) []corev1.Event {
	h.t.Helper()
	list, err := clientset.CoreV1().Events("").List(h.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		h.t.Fatal(err)
	}
	return list.Items
}

func (h *harness) waitEvent(name, reason, contains string) corev1.Event {
	h.t.Helper()
	var found corev1.Event
	h.eventually(fmt.Sprintf("event %s on %s containing %q", reason, name, contains), func() bool {
		for _, e := range h.events(name, reason) {
			if strings.Contains(e.Message, contains) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// pause creates the pause ConfigMap.
func (h *harness) pause(reason string) {
	h.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.opts.PauseConfigMap}, Data: map[string]string{"reason": reason}}
	if err := k8s.Create(h.ctx, cm); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) unpause() {
	h.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.opts.PauseConfigMap}}
	if err := k8s.Delete(h.ctx, cm); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) annotate(name, key string, value *string) {
	h.t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if err := k8s.Patch(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) policy(name string, spec v1alpha1.NodeRepairPolicySpec) {
	h.t.Helper()
	if err := k8s.Create(h.ctx, &v1alpha1.NodeRepairPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) exists(apiVersion, kind, ns, name string) bool {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	err := k8s.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return u.GetDeletionTimestamp() == nil
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ptr[T any](v T) *T { return &v }

type (
	corev1Pod   = corev1.Pod
	policyv1PDB = policyv1.PodDisruptionBudget
)

func (h *harness) podTerminating(ns, name string) bool {
	h.t.Helper()
	p := &corev1.Pod{}
	err := k8s.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return p.DeletionTimestamp != nil
}

// withLadder gives nodes no engine owns the default ladder (Reboot,
// Quarantine; ResetAccelerator first for reset-class XIDs).
func withLadder(o *controller.Options) { o.ReplaceUnowned = false }
