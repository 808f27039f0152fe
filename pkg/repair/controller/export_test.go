package controller

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
)

// GateCounts is what the gate counts for the cached node called name: from
// the informer-kept tallies (synced false before they have counted the
// initial nodes) and by walking the cache. A node without a zone has a zero
// zone group.
func (r *Reconciler) GateCounts(ctx context.Context, name string) (tallied, walked [2]gate.Group, synced bool, err error) {
	node := &corev1.Node{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return tallied, walked, false, err
	}
	set, err := r.policies(ctx, false)
	if err != nil {
		return tallied, walked, false, err
	}
	lookup, err := r.machineLookup(ctx)
	if err != nil {
		return tallied, walked, false, err
	}
	g := group{pool: r.pools.Of(node, lookup), zone: node.Labels[pool.ZoneLabel]}
	wp, wz, err := r.walk(ctx, g, set, lookup)
	if err != nil {
		return tallied, walked, false, err
	}
	walked = pair(wp, wz)
	if r.counts == nil || !r.countsSynced() {
		return tallied, walked, false, nil
	}
	tp, tz := r.counts.Group(node, g.pool, g.zone, set, lookup)
	return pair(tp, tz), walked, true, nil
}

func pair(p gate.Group, z *gate.Group) [2]gate.Group {
	if z == nil {
		return [2]gate.Group{p}
	}
	return [2]gate.Group{p, *z}
}

// NodePatch is the patch the reconciler sends for a write from old.
var NodePatch = nodePatch

// TerminateStale runs the termination step for node as a reconcile would
// that read node from a cache not yet told of its deletion.
func (r *Reconciler) TerminateStale(ctx context.Context, node *corev1.Node) error {
	st, err := record.Read(node)
	if err != nil {
		return err
	}
	_, err = r.terminate(ctx, node, st, r.opts.Clock.Now(), false)
	return err
}

// Backlog is the breaker's backlog of the group key (a pool's key, or
// "zone/" and the zone), oldest first.
func (r *Reconciler) Backlog(key string) []string { return r.breaker.Backlog(key) }

// PolicyProblems compiles the policies as a reconcile does, against what
// is known of the agents' quiet periods now.
func (r *Reconciler) PolicyProblems(ctx context.Context) ([]policy.Problem, error) {
	list := &v1alpha1.NodeRepairPolicyList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil, err
	}
	agents, key := r.agents.current()
	_, problems := r.policySet.compile(list.Items, agents, key)
	return problems, nil
}

// ReadAgentQuietPeriods runs the watch of the agents' ConfigMap alone, with
// cs's credentials, until it has read the ConfigMap or failed to list it,
// and returns what it knows then.
func ReadAgentQuietPeriods(ctx context.Context, cs kubernetes.Interface, ns, name string) (policy.AgentQuietPeriods, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := newAgentConfig(cs, ns, name, logr.Discard(), func(context.Context) []reconcile.Request { return nil })
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := a.Start(ctx, q); err != nil {
		return policy.AgentQuietPeriods{}, err
	}
	if err := a.WaitForSync(ctx); err != nil {
		return policy.AgentQuietPeriods{}, err
	}
	agents, _ := a.current()
	return agents, nil
}
