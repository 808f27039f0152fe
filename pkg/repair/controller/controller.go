// Package controller is nodemend's repair controller: one reconciler per
// Node that chains the pure decisions (policy → unhealthy → gate) with the
// workflow steps (taint → drain → hand to the backend) and records every
// step on the Node, so that any replica that becomes leader resumes the
// repair where the last one stopped.
package controller

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/backend/backends"
	"nodemend.dev/nodemend/pkg/repair/drainpass"
	"nodemend.dev/nodemend/pkg/repair/fleetcount"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/metrics"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/slots"
)

// Name is the controller's name in logs, metrics and events.
const Name = "nodemend-repair"

// DefaultMaxConcurrentDrains is the default bound on drains at once. A
// drain moves a node's pods onto the rest of the fleet: many at once ask
// the scheduler and the remaining capacity for a burst the pool gate alone
// does not bound (a fifth of a 500-node pool is 100 nodes of pods). Ten is
// the disruption budget node autoscalers use by default for a pool of 100
// (Karpenter's default budget is 10% of a NodePool), and keeps a storm's
// repairs flowing: a drain takes a few API requests plus its pods' grace
// periods, and a node that waits its turn is already tainted.
const DefaultMaxConcurrentDrains = 10

// Retries of a node whose reconcile failed (a write that conflicted
// included, Reconcile): 5 ms doubling to 30 s, with jitter, per node
// (internal/backoff.PerItem), starting over after a reconcile that
// succeeds. controller-runtime's default starts as fast but has no jitter
// and a 1000 s cap: after an API outage a node that failed often would
// wait a quarter of an hour for its next reconcile, and the nodes that
// failed together would retry together.
const (
	RetryInitial = 5 * time.Millisecond
	RetryMax     = 30 * time.Second
)

// DefaultMaxConcurrentReconciles is the default number of nodes reconciled
// at once. A storm's decisions are bound by the API server, which does more
// per second with more of them in flight: 16 workers decided 1,000 due
// nodes at 75–102% of the server's write ceiling (mean 90%, four runs), 8 at
// 79–90% (docs/performance.md). Drains are bounded apart (above).
const DefaultMaxConcurrentReconciles = 16

// Options configure the repair controller.
type Options struct {
	// Clock is the controller's time; tests inject a fake one, with a
	// NewQueue whose RequeueAfter waits on it.
	Clock clock.Clock
	// Namespace and PauseConfigMap locate the pause switch: while that
	// ConfigMap exists, nothing is repaired; data.reason says why.
	Namespace      string
	PauseConfigMap string
	// AgentConfig names the agents' ConfigMap in Namespace (their config
	// file under policy.AgentConfigKey): the quiet periods the policies are
	// judged against (docs/repair.md). Empty: unknown, and policies that an
	// agent's override could defeat are warned.
	AgentConfig string
	// DryRun logs and emits NodeRepairWouldStart instead of repairing, and
	// writes nothing at all.
	DryRun bool
	// PoolLabel, when set, is a node label that defines pools, before the
	// engines' groupings.
	PoolLabel string
	// Backend, when set, is used for every node instead of the one chosen
	// by owner (a name in backends.Table).
	Backend string
	// ReplaceUnowned makes Replace (delete the Node object) the default
	// ladder of nodes no engine owns, as before the ladder existed, instead
	// of [ResetAccelerator,] Reboot, Quarantine. A policy's own action or
	// ladder still wins.
	ReplaceUnowned bool
	// RecheckInterval is how often a blocked repair is reconsidered.
	// Default 5m.
	RecheckInterval time.Duration
	// DrainPollInterval is how often a drain pass runs while pods remain.
	// Default 10s.
	DrainPollInterval time.Duration
	// TerminationTimeout is how long a node may outlive its hand-over to the
	// backend before the repair is reported failed. Default 30m.
	TerminationTimeout time.Duration
	// MaxConcurrentReconciles: default DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// MaxConcurrentDrains bounds the repairs that drain at once, over the
	// whole fleet; a policy's drain.maxConcurrent bounds its own nodes as
	// well. Every due node is tainted first (the decision; the gates bound
	// how many), then the drains take turns. Default
	// DefaultMaxConcurrentDrains; negative: unbounded.
	MaxConcurrentDrains int
	// Registerer receives the metrics (controller-runtime's registry in the
	// binary). Nil: no metrics.
	Registerer prometheus.Registerer
	// NewQueue builds the controller's work queue (controller-runtime's
	// controller.Options.NewQueue); nil: controller-runtime's. The queue's
	// clock is the one RequeueAfter waits on: a controller on a fake Clock
	// needs a queue whose delays run on it.
	NewQueue func(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
	// AgentSilence is how long a node's agent may go without a heartbeat
	// before the ladder takes it for gone and skips the rungs only the
	// agent carries out (Reboot, ResetAccelerator). Default
	// ladder.DefaultAgentSilence; negative: never skip.
	AgentSilence time.Duration
	// EtcdHealth says whether etcd answers, before an etcd member's node
	// is repaired (a policy with controlPlane: Repair). Nil: the API
	// server's /readyz/etcd (APIServerEtcdHealth).
	EtcdHealth EtcdHealth
}

func (o *Options) defaults() error {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = 5 * time.Minute
	}
	if o.DrainPollInterval <= 0 {
		o.DrainPollInterval = 10 * time.Second
	}
	if o.TerminationTimeout <= 0 {
		o.TerminationTimeout = 30 * time.Minute
	}
	if o.AgentSilence == 0 {
		o.AgentSilence = ladder.DefaultAgentSilence
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	switch {
	case o.MaxConcurrentDrains == 0:
		o.MaxConcurrentDrains = DefaultMaxConcurrentDrains
	case o.MaxConcurrentDrains < 0:
		o.MaxConcurrentDrains = 0 // slots: no bound
	}
	if o.Namespace == "" || o.PauseConfigMap == "" {
		return fmt.Errorf("namespace and pause ConfigMap name are required")
	}
	return backends.CheckOverride(o.Backend)
}

// Reconciler repairs nodes.
type Reconciler struct {
	opts      Options
	client    client.Client
	apiReader client.Reader
	mapper    meta.RESTMapper
	drainer   drainpass.Drainer
	recorder  recorder.EventRecorder
	// events, instance, sentOwn and log write the events that must not
	// fold into another's series (events.go, sendOwn).
	events   eventsv1client.EventsV1Interface
	instance string
	sentOwn  atomic.Uint64
	log      logr.Logger
	backends backend.Registry
	pools    pool.Resolver
	metrics  *metrics.Metrics
	// queue is the controller's work queue once it runs (requeue.go).
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	// watched are the served versions of the kinds the backends pool
	// nodes by (backends.Watches: Cluster API Machines); none when no
	// engine that needs them is installed.
	watched []schema.GroupVersionKind
	// orders: the NodeRemediation CRD is installed.
	orders bool
	// nodeStore is the Node informer's store, read without copies by the
	// gauges; nil if the cache does not expose it (then a list is used).
	nodeStore toolscache.Store
	// counts are the gate's tallies, kept by the Node informer's events;
	// until countsSynced (the informer's initial nodes all counted), and
	// without them, the gate walks the fleet.
	counts       *fleetcount.Counts
	countsSynced func() bool
	// policySet is the last compiled policy set, reused while the
	// policies are unchanged: the tallies are valid for one set.
	policySet policySet
	// agents is what is known of the agents' quiet periods (agentconfig.go).
	agents *agentConfig

	mu sync.Mutex
	// inflight are repairs seen in progress, so that the node's
	// disappearance can be reported as their success.
	inflight map[string]inflight
	// dedupe keeps events to one per state (events.go).
	dedupe dedupe
	// held are decisions' events waiting for their node's next reconcile
	// (events.go, emitWithNextStep).
	held heldEvents
	// blocked are the nodes blocked by a pool or zone gate now, for the
	// gauge and for the pool events.
	blocked map[string]blockedAt

	// drains are the drain turns (pkg/repair/slots).
	drains *slots.Slots
	// breaker keeps the pool and zone gates from latching or stampeding
	// (pkg/repair/gate.Breaker): the due nodes a gate held start, once
	// their group is back under its threshold, one drain slot at a time,
	// oldest first.
	breaker *gate.Breaker
	// etcd is Options.EtcdHealth (controlplane.go).
	etcd EtcdHealth
	// controlPlaneMu makes opted-in control-plane nodes' decisions one at
	// a time, each up to its start (controlplane.go).
	controlPlaneMu sync.Mutex
}

type blockedAt struct {
	// where is the pool key, or "zone/" and the zone.
	where string
	gate  gate.Gate
}

type inflight struct {
	uid types.UID
	// trigger is the condition that started the repair.
	trigger v1alpha1.RepairTrigger
	since   time.Time
	// deletedSelf: this process deleted the Node object itself (a target
	// that is the node), so a later reconcile waits for it to go without
	// reading it again: the cache may not have seen the deletion yet.
	deletedSelf bool
}

// Setup adds the repair controller to mgr.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*Reconciler, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		opts:      opts,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		mapper:    mgr.GetRESTMapper(),
		drainer:   drainpass.Drainer{Client: cs},
		recorder:  mgr.GetEventRecorder(Name),
		events:    cs.EventsV1(),
		instance:  Name + "-" + hostname(),
		log:       mgr.GetLogger().WithName(Name),
		pools:     backends.Pools(opts.PoolLabel),
		inflight:  map[string]inflight{},
		blocked:   map[string]blockedAt{},
		drains:    slots.New(opts.MaxConcurrentDrains),
		breaker:   gate.NewBreaker(),
		etcd:      opts.EtcdHealth,
	}
	if r.etcd == nil {
		r.etcd = APIServerEtcdHealth{REST: cs.Discovery().RESTClient()}
	}
	r.agents = newAgentConfig(cs, opts.Namespace, opts.AgentConfig, r.log.WithName("agent-config"), func(ctx context.Context) []reconcile.Request {
		return r.allNodes(ctx, nil)
	})
	r.backends = backends.Table(backends.Deps{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper()})
	if opts.Registerer != nil {
		r.metrics = metrics.New(opts.Registerer, fleetView{r: r, ctx: ctx})
	}
	// The kinds the backends pool nodes by are watched (metadata only)
	// where the cluster serves them, so that pool lookups read a synced
	// cache.
	for _, gk := range backends.Watches() {
		if m, err := mgr.GetRESTMapper().RESTMapping(gk); err == nil {
			r.watched = append(r.watched, m.GroupVersionKind)
		} else if !meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("looking up %s: %w", gk, err)
		}
	}
	// The informer is registered now and started with the cache; its store
	// is read only after the controller's sources have synced. The gate's
	// tallies follow its events (pkg/repair/fleetcount).
	if inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{}); err == nil {
		if si, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
			r.nodeStore = si.GetStore()
		}
		counts := fleetcount.New(r.pools, len(r.watched) > 0)
		if reg, err := inf.AddEventHandler(counts.Handler()); err == nil {
			r.counts, r.countsSynced = counts, reg.HasSynced
		}
	}

	// kube-system's pods (the cache holds no others, NewManager), indexed
	// by node for the control-plane gate's static pods; watched without a
	// handler so that the cache has them before the first decision.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeIndex, func(o client.Object) []string {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing pods by node: %w", err)
	}

	// The agents' Warnings (the cache holds only theirs, NewManager),
	// indexed by node: a cloud's scheduled event, as the node's agent
	// reports it, is the evidence of a drain ahead of it (scheduled.go).
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Event{}, agentEventNodeIndex, agentEventIndex); err != nil {
		return nil, fmt.Errorf("indexing events by node: %w", err)
	}

	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&corev1.Node{}).
		Watches(&v1alpha1.NodeRepairPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allNodes)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.allNodes),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetNamespace() == opts.Namespace && o.GetName() == opts.PauseConfigMap
			}))).
		WatchesRawSource(source.Func(r.startQueue)).
		WatchesRawSource(r.agents).
		Watches(&corev1.Pod{}, handler.Funcs{}).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(agentEventNode)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			SkipNameValidation:      &opts.SkipNameValidation,
			RateLimiter:             &backoff.PerItem[reconcile.Request]{Initial: RetryInitial, Max: RetryMax},
			NewQueue:                opts.NewQueue,
		})
	// NodeRemediations (the ladder's orders) are watched when their CRD is
	// installed: an agent's report wakes the order's node. Without it, the
	// rungs that need an order fail and the ladder goes on.
	if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: "NodeRemediation"}); err == nil {
		r.orders = true
		b = b.Watches(&v1alpha1.NodeRemediation{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if nr, ok := o.(*v1alpha1.NodeRemediation); ok {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: nr.Spec.NodeName}}}
			}
			return nil
		}))
	} else if !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("looking up NodeRemediations: %w", err)
	}
	// The watched objects' events need no reconcile: a decision reads them.
	for _, gvk := range r.watched {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(obj, handler.Funcs{})
	}
	return r, b.Complete(r)
}

// allNodes enqueues every node: a policy or the pause switch changed.
func (r *Reconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing nodes to re-evaluate")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nodes.Items))
	for i := range nodes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: nodes.Items[i].Name}})
	}
	return reqs
}

// hostname names this replica in its events' reportingInstance, as the
// events library does (nodemend-repair-HOSTNAME).
func hostname() string {
	h, _ := os.Hostname()
	return h
}
