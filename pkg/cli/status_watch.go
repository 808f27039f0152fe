package cli

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// clearScreen moves the cursor home and clears the terminal, so that each
// render replaces the last one.
const clearScreen = "\x1b[H\x1b[2J"

// watchLoop keeps informers on everything status reads (after one initial
// list each, updates arrive as watch events) and re-renders on change, at
// most once per --watch-interval, and at least once per --watch-refresh.
func (o *statusOptions) watchLoop(ctx context.Context, c *Clients, s Streams, view statusView) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dirty := make(chan struct{}, 1)
	poke := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	var synced []cache.InformerSynced
	nodeFactory := informers.NewSharedInformerFactory(c.Bulk, 0)
	nodes := nodeFactory.Core().V1().Nodes().Informer()
	// Images and managed fields are most of a Node and never shown.
	_ = nodes.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			n.ManagedFields, n.Status.Images = nil, nil
		}
		return obj, nil
	})
	_, _ = nodes.AddEventHandler(handler)
	synced = append(synced, nodes.HasSynced)

	// An informer on something it may not list would retry forever and
	// never sync: each kind is listed once first, as status does without
	// --watch, and an unreadable pause switch is reported, not waited for.
	if _, err := c.Bulk.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return Explain(err, "listing nodes")
	}
	pauseFactory := informers.NewSharedInformerFactoryWithOptions(c.Core, 0, informers.WithNamespace(o.controller.namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = "metadata.name=" + o.controller.pauseConfigMap }))
	var pause cache.SharedIndexInformer
	if _, err := c.Core.CoreV1().ConfigMaps(o.controller.namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + o.controller.pauseConfigMap}); err == nil {
		pause = pauseFactory.Core().V1().ConfigMaps().Informer()
		_, _ = pause.AddEventHandler(handler)
		synced = append(synced, pause.HasSynced)
	} else {
		fmt.Fprintln(s.Err, termsafe.String(fmt.Sprintf("warning: cannot watch the pause switch (ConfigMap %s/%s): %v; shown as not paused",
			o.controller.namespace, o.controller.pauseConfigMap, apierrors.ReasonForError(err))))
	}

	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	var policies cache.SharedIndexInformer
	if _, err := c.Dynamic.Resource(nodeRepairPolicyGVR).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
		policies = dynFactory.ForResource(nodeRepairPolicyGVR).Informer()
		_, _ = policies.AddEventHandler(handler)
		synced = append(synced, policies.HasSynced)
	} else if !apierrors.IsNotFound(err) {
		return Explain(err, "listing noderepairpolicies.nodemend.dev")
	}
	metaFactory := metadatainformer.NewSharedInformerFactory(c.Metadata, 0)
	var machines cache.SharedIndexInformer
	if gvr, ok := machineGVR(c.Core.Discovery()); ok {
		if _, err := c.Metadata.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return Explain(err, "listing Cluster API machines")
		}
		machines = metaFactory.ForResource(gvr).Informer()
		_, _ = machines.AddEventHandler(handler)
		synced = append(synced, machines.HasSynced)
	}
	for _, f := range []interface{ Start(<-chan struct{}) }{nodeFactory, pauseFactory, dynFactory, metaFactory} {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watching the fleet: caches did not sync")
	}

	// Read once, not watched: the agents' config changes rarely, and a
	// watch would hold one more informer for it.
	agents, warning := readAgentQuietPeriods(ctx, c, o.controller)
	if warning != "" {
		fmt.Fprintln(s.Err, termsafe.String("warning: "+warning))
	}
	snapshot := func() (*fleetState, error) {
		f := &fleetState{}
		for _, obj := range nodes.GetStore().List() {
			if n, ok := obj.(*corev1.Node); ok {
				f.nodes = append(f.nodes, n)
			}
		}
		var items []unstructured.Unstructured
		if policies != nil {
			for _, obj := range policies.GetStore().List() {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					items = append(items, *u)
				}
			}
		}
		var err error
		if f.policies, f.problems, err = compilePolicies(items, agents); err != nil {
			return nil, err
		}
		if pause != nil {
			for _, obj := range pause.GetStore().List() {
				if cm, ok := obj.(*corev1.ConfigMap); ok {
					f.paused, f.pauseReason = true, pauseReason(cm)
				}
			}
		}
		if machines != nil {
			var ms []metav1.PartialObjectMetadata
			for _, obj := range machines.GetStore().List() {
				if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
					ms = append(ms, *m)
				}
			}
			f.machines = machineIndex(ms)
		}
		return f, nil
	}
	terminal := IsTerminal(s.Out)
	render := func() error {
		f, err := snapshot()
		if err != nil {
			return err
		}
		view.nodeLabels = labelsByName(f.nodes)
		now := o.now()
		if view.output == OutputTable || view.output == OutputWide {
			if terminal {
				fmt.Fprint(s.Out, clearScreen)
			}
			fmt.Fprintf(s.Out, "%s  (watching; Ctrl-C to stop)\n", now.Format("15:04:05"))
		}
		return view.render(s.Out, fleet.Assess(f.input(o.controller, now)))
	}
	if err := render(); err != nil {
		return err
	}
	// The initial sync's add events are in that first render.
	select {
	case <-dirty:
	default:
	}
	refresh := time.NewTicker(o.refresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
		case <-dirty:
			// Throttle: changes arriving during the interval are merged
			// into one render at its end, so a fleet whose nodes
			// heartbeat constantly still renders at a steady rate.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.throttle):
			}
			select {
			case <-dirty:
			default:
			}
		}
		if err := render(); err != nil {
			return err
		}
	}
}
