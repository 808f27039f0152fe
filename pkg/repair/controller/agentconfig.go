package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"nodemend.dev/nodemend/pkg/repair/policy"
)

// agentConfig is what the controller knows of the agents' quiet periods
// (policy.AgentQuietPeriods): read from the agents' ConfigMap, which it
// watches, so that a policy an agent's override makes unable to fire is
// refused, and one the override no longer defeats is accepted again,
// without a restart. Its informer is its own, not the manager's cache: that
// cache lists ConfigMaps by one name (the pause switch), as RBAC limited by
// resourceNames requires, and this is a second name.
type agentConfig struct {
	ns, name string
	log      logr.Logger
	// informer holds the one ConfigMap; nil when none is named.
	informer toolscache.SharedIndexInformer
	// enqueue lists the reconciles a change needs (every node: any
	// policy's judgement may change).
	enqueue func(context.Context) []reconcile.Request

	mu sync.Mutex
	// listErr is the informer's last list or watch error: before it has
	// synced, the reason the ConfigMap is not known (RBAC, say).
	listErr error
	// key is what agents was read from (readKey), so that the file is
	// parsed once per change and the policies compiled once per change.
	key    string
	agents policy.AgentQuietPeriods
}

func newAgentConfig(cs kubernetes.Interface, ns, name string, log logr.Logger, enqueue func(context.Context) []reconcile.Request) *agentConfig {
	a := &agentConfig{ns: ns, name: name, log: log, enqueue: enqueue}
	if name == "" {
		return a
	}
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	a.informer = toolscache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	_ = a.informer.SetWatchErrorHandler(func(r *toolscache.Reflector, err error) {
		a.mu.Lock()
		a.listErr = err
		a.mu.Unlock()
		toolscache.DefaultWatchErrorHandler(context.Background(), r, err)
	})
	return a
}

// Start runs the informer with the controller (a source.SyncingSource):
// each change of the ConfigMap queues every node, whose reconcile
// compiles the policies again against it and reports what changed.
func (a *agentConfig) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if a.informer == nil {
		return nil
	}
	requeue := func(any) {
		for _, req := range a.enqueue(ctx) {
			q.Add(req)
		}
	}
	if _, err := a.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: requeue, UpdateFunc: func(_, o any) { requeue(o) }, DeleteFunc: requeue,
	}); err != nil {
		return err
	}
	go a.informer.RunWithContext(ctx)
	return nil
}

// WaitForSync holds the controller's start until the ConfigMap is read (or
// known missing), so that the first decisions judge the policies against
// it; a ConfigMap that cannot be listed (no RBAC) does not hold the
// controller: it runs with the agents' quiet periods unknown, and says so.
func (a *agentConfig) WaitForSync(ctx context.Context) error {
	if a.informer == nil {
		return nil
	}
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.informer.HasSynced() || a.listErr != nil, nil
	})
}

// current is what is known of the agents' quiet periods now, and a key that
// changes when it does.
func (a *agentConfig) current() (policy.AgentQuietPeriods, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key, read := a.state()
	if key == a.key {
		return a.agents, a.key
	}
	a.key, a.agents = key, read()
	if a.agents.Known {
		a.log.Info("read the agents' quiet periods", "from", a.agents.From, "overrides", len(a.agents.Overrides))
	} else {
		a.log.Info("the agents' quiet periods are unknown: NodeRepairPolicies are judged by the registry's and warned", "why", a.agents.Unknown)
	}
	return a.agents, a.key
}

// state says which state the ConfigMap is in, as a key that changes when it
// does (its resourceVersion once read), and how to read what that state says
// of the agents' quiet periods: current reads it only when the key changed.
func (a *agentConfig) state() (string, func() policy.AgentQuietPeriods) {
	where := fmt.Sprintf("ConfigMap %s/%s", a.ns, a.name)
	unknown := func(key, format string, args ...any) (string, func() policy.AgentQuietPeriods) {
		return key, func() policy.AgentQuietPeriods {
			return policy.AgentQuietPeriods{Unknown: fmt.Sprintf(format, args...)}
		}
	}
	switch {
	case a.informer == nil:
		return unknown("unnamed", "no agents' ConfigMap is named (--agent-config is empty): agents configured outside the chart, such as systemd agents reading their own file, are not seen; set --agent-config, as the chart does")
	case !a.informer.HasSynced() && a.listErr != nil:
		return unknown("unreadable/"+a.listErr.Error(), "%s cannot be read: %v", where, a.listErr)
	case !a.informer.HasSynced():
		return unknown("unread", "%s not read yet", where)
	}
	obj, ok, _ := a.informer.GetStore().GetByKey(a.ns + "/" + a.name)
	cm, isCM := obj.(*corev1.ConfigMap)
	if !ok || !isCM {
		return unknown("missing", "%s not found: the agents read their configuration elsewhere (a systemd agent reads its own file), or it was deleted", where)
	}
	return "rv/" + cm.ResourceVersion, func() policy.AgentQuietPeriods { return policy.FromAgentConfigMap(cm) }
}
