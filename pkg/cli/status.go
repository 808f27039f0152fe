package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

type statusOptions struct {
	selector  string
	output    string
	watch     bool
	unhealthy bool
	// throttle is the shortest time between two renders in --watch.
	throttle time.Duration
	// refresh re-renders in --watch without any change, so that the time
	// left of tolerating nodes counts down.
	refresh    time.Duration
	controller controllerFlags
	// now is the clock (tests).
	now func() time.Time
}

func newStatusCommand(g *Global, s Streams) *cobra.Command {
	o := &statusOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "status [-l SELECTOR]",
		Short: "Show every node's health and repair state, and each pool's safety gate",
		Long: `status shows one row per node: its pool and zone, the kubelet's Ready and nodemend's five
conditions (K KernelReady, R ContainerRuntimeReady, N NetworkingReady, S StorageReady,
A AcceleratedHardwareReady), the reason of the first failing one, and the repair state that
nodemend-controller decides with the same code: healthy, tolerating (with the time left),
due, blocked (by the pool or zone gate, a veto or the pause), draining, terminating, failed.
Below, one line per pool: unhealthy nodes against what maxUnhealthy allows.

The gate counts whole pools, so every node is listed from the API (one list per kind, no
per-node requests); -l only selects the rows shown.

Needs: list nodes, list noderepairpolicies.nodemend.dev, get configmaps in the controller's
namespace (the pause switch), and list machines.cluster.x-k8s.io when Cluster API is installed.`,
		Example: `  kubectl mend status
  kubectl mend status -l karpenter.sh/nodepool=gpu -o wide
  kubectl mend status --unhealthy --watch
  kubectl mend status -o json | jq '.pools[] | select(.blocked)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g, s)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.selector, "selector", "l", "", "label selector of the nodes shown (pools are still counted whole)")
	fl.StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml (default: table)")
	fl.BoolVarP(&o.watch, "watch", "w", false, "keep watching and re-render on every change")
	fl.BoolVar(&o.unhealthy, "unhealthy", false, "show only nodes that are not healthy")
	fl.DurationVar(&o.throttle, "watch-interval", 500*time.Millisecond, "with --watch, the shortest time between two renders (changes in between are merged)")
	fl.DurationVar(&o.refresh, "watch-refresh", 30*time.Second, "with --watch, re-render at least this often so that times count down")
	o.controller.bind(fl)
	return cmd
}

func (o *statusOptions) validate() (labels.Selector, error) {
	if err := checkOutput(o.output, OutputTable, OutputWide, OutputJSON, OutputYAML); err != nil {
		return nil, err
	}
	if o.throttle <= 0 || o.refresh <= 0 {
		return nil, errors.New("--watch-interval and --watch-refresh must be positive")
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", o.selector, err)
	}
	return sel, nil
}

func (o *statusOptions) run(ctx context.Context, g *Global, s Streams) error {
	sel, err := o.validate()
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := g.Clients()
	if err != nil {
		return err
	}
	view := statusView{output: o.output, palette: g.Palette(s.Out), selector: sel, unhealthyOnly: o.unhealthy}
	if o.watch {
		return o.watchLoop(ctx, c, s, view)
	}
	f, err := loadFleet(ctx, c, o.controller)
	if err != nil {
		return err
	}
	for _, w := range f.warnings {
		fmt.Fprintln(s.Err, "warning:", termsafe.String(fmt.Sprint(w)))
	}
	view.nodeLabels = labelsByName(f.nodes)
	return view.render(s.Out, fleet.Assess(f.input(o.controller, o.now())))
}

// labelsByName indexes node labels for -l, which filters rows after the
// whole fleet was assessed.
func labelsByName(nodes []*corev1.Node) func(string) labels.Set {
	idx := make(map[string]labels.Set, len(nodes))
	for _, n := range nodes {
		idx[n.Name] = n.Labels
	}
	return func(name string) labels.Set { return idx[name] }
}
