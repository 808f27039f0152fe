package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nodemend.dev/nodemend/pkg/cli/eventlog"
	"nodemend.dev/nodemend/pkg/cli/timeline"
	"nodemend.dev/nodemend/pkg/repair/backend/clusterapi"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
)

type timelineOptions struct {
	output      string
	replacement string
	width       int
	controller  controllerFlags
	now         func() time.Time
}

func newTimelineCommand(g *Global, s Streams) *cobra.Command {
	o := &timelineOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "timeline NODE",
		Short: "What happened to a node, and how long each repair phase took",
		Long: `timeline merges everything that remains about a node: its events (nodemend-agent's
detections, nodemend-controller's repair steps, the kubelet's and Karpenter's), its condition
transitions, the repair annotations, its NodeClaim or Machine, and the node that replaced it.
It orders them and draws one bar per phase:

  detect       first detection event → condition False
  toleration   condition False → toleration passed (or recovery)
  blocked      toleration passed → repair start, while a gate was closed
  drain        taint → pods gone, node handed to its engine
  terminate    hand-over → node gone
  replacement  replacement node created → Ready

It works for a node that is already gone, from the events that remain (the API server keeps
them an hour by default).

Needs: get nodes, list events, and get nodeclaims.karpenter.sh / machines.cluster.x-k8s.io
when the node has one.`,
		Example: `  kubectl mend timeline ip-10-0-1-23.ec2.internal
  kubectl mend timeline ip-10-0-1-23.ec2.internal -o json | jq '.phases[] | {name, durationSeconds}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, s, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: bars and events)")
	fl.StringVar(&o.replacement, "replacement", "", "the node that replaced NODE, when it cannot be found (default: the first node of the same pool created after the repair started)")
	fl.IntVar(&o.width, "width", 48, "width of the bars, in characters")
	o.controller.bind(fl)
	return cmd
}

func (o *timelineOptions) run(ctx context.Context, g *Global, s Streams, name string) error {
	if err := checkOutput(o.output, OutputTable, OutputJSON, OutputYAML); err != nil {
		return err
	}
	if o.width < 10 {
		return errors.New("--width must be at least 10")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := g.Clients()
	if err != nil {
		return err
	}
	in, err := o.gather(ctx, c, name)
	if err != nil {
		return err
	}
	if in.Node == nil && len(in.Events) == 0 {
		return fmt.Errorf("node %q not found, and no events about it remain (the API server keeps events for an hour by default)", name)
	}
	tl := timeline.Build(in)
	if o.output != OutputTable {
		return printStructured(s.Out, o.output, tl)
	}
	return renderTimeline(s.Out, g.Palette(s.Out), tl, o.width, time.Local)
}

// gather reads the node (if it still exists), the events about it and its
// owner, the owner, and its replacement.
func (o *timelineOptions) gather(ctx context.Context, c *Clients, name string) (timeline.Input, error) {
	in := timeline.Input{Name: name, Now: o.now()}
	node, err := c.Core.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return in, Explain(err, "reading node "+name)
	default:
		in.Node = node
	}
	evs, err := eventsAbout(ctx, c, "Node", "", name)
	if err != nil {
		return in, err
	}
	in.Events = evs
	kind, ns, ownerName := ownerOf(in.Node, evs)
	if kind != "" {
		owner, ownerEvents, err := readOwner(ctx, c, kind, ns, ownerName)
		if err != nil {
			return in, err
		}
		in.Owner = owner
		in.Events = append(in.Events, ownerEvents...)
	}
	rep, err := o.findReplacement(ctx, c, in, kind, ownerName)
	if err != nil {
		return in, err
	}
	in.Replacement = rep
	return in, nil
}

// eventsAbout lists the events whose object is kind/name, in every
// namespace (a Node's events are in "default"; events.k8s.io events about a
// cluster-scoped object too, but other writers differ).
func eventsAbout(ctx context.Context, c *Clients, kind, namespace, name string) ([]eventlog.Event, error) {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}
	if namespace != "" {
		sel["involvedObject.namespace"] = namespace
	}
	list, err := c.Bulk.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(sel).String()})
	if err != nil {
		return nil, Explain(err, "listing events")
	}
	return eventlog.FromCoreList(list.Items), nil
}

// ownerOf names the node's NodeClaim or Machine: from the node itself, or,
// for a gone node, from the target recorded in the controller's hand-over
// event.
func ownerOf(node *corev1.Node, evs []eventlog.Event) (kind, namespace, name string) {
	if node != nil {
		for _, r := range node.OwnerReferences {
			if r.Kind == "NodeClaim" && strings.HasPrefix(r.APIVersion, karpenter.Group+"/") {
				return "NodeClaim", "", r.Name
			}
		}
		if ns, m, ok := clusterapi.MachineOf(node); ok {
			return "Machine", ns, m
		}
		if st, err := record.Read(node); err == nil && st.Target != nil && st.Target.Kind != "Node" {
			return st.Target.Kind, st.Target.Namespace, st.Target.Name
		}
		return "", "", ""
	}
	if e, ok := eventlog.Latest(evs, "", history.HandedOver); ok && e.Repair != nil && e.Repair.Target != nil {
		if t := e.Repair.Target; t.Kind == "NodeClaim" || t.Kind == "Machine" {
			return t.Kind, t.Namespace, t.Name
		}
	}
	return "", "", ""
}

func ownerGVR(c *Clients, kind string) (schema.GroupVersionResource, bool) {
	if kind == "NodeClaim" {
		return nodeClaimGVR, true
	}
	return machineGVR(c.Core.Discovery())
}

// readOwner reads the NodeClaim or Machine (it may be gone) and its events.
func readOwner(ctx context.Context, c *Clients, kind, namespace, name string) (*timeline.Owner, []eventlog.Event, error) {
	evs, err := eventsAbout(ctx, c, kind, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	gvr, ok := ownerGVR(c, kind)
	if !ok {
		return nil, evs, nil
	}
	u, err := c.Dynamic.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || meta404(err) {
		return nil, evs, nil
	}
	if err != nil {
		return nil, nil, Explain(err, "reading "+kind+" "+name)
	}
	return ownerFrom(u), evs, nil
}

// meta404 is a missing CRD (the engine is not installed).
func meta404(err error) bool {
	var se *apierrors.StatusError
	return errors.As(err, &se) && se.ErrStatus.Code == 404
}

func ownerFrom(u *unstructured.Unstructured) *timeline.Owner {
	o := &timeline.Owner{Kind: u.GetKind(), Name: u.GetName(), Created: u.GetCreationTimestamp().Time}
	if d := u.GetDeletionTimestamp(); d != nil {
		o.Deleted = d.Time
	}
	for _, c := range conditionsOf(u) {
		o.Conditions = append(o.Conditions, timeline.Transition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, Time: c.Time})
	}
	return o
}

// findReplacement is --replacement, or the first node of the same pool
// created after the repair started (or after the node was created, for a
// node not repaired).
func (o *timelineOptions) findReplacement(ctx context.Context, c *Clients, in timeline.Input, ownerKind, ownerName string) (*corev1.Node, error) {
	if o.replacement != "" {
		n, err := c.Core.CoreV1().Nodes().Get(ctx, o.replacement, metav1.GetOptions{})
		if err != nil {
			return nil, Explain(err, "reading --replacement node")
		}
		return n, nil
	}
	sel, after := replacementQuery(in, o.controller.poolLabel, ownerKind, ownerName)
	if sel == "" {
		return nil, nil
	}
	list, err := c.Bulk.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, Explain(err, "listing nodes of the pool")
	}
	// Creation timestamps have whole seconds; the repair's start may have
	// microseconds (events.k8s.io), and Karpenter launches within that second.
	after = after.Truncate(time.Second)
	var best *corev1.Node
	for i := range list.Items {
		n := &list.Items[i]
		if n.Name == in.Name || n.CreationTimestamp.Time.Before(after) {
			continue
		}
		if best == nil || n.CreationTimestamp.Before(&best.CreationTimestamp) {
			best = n
		}
	}
	return best, nil
}

// replacementQuery is the label selector of the node's pool and the time a
// replacement must be newer than; "" when there is no repair to replace
// for, or no pool to look in.
func replacementQuery(in timeline.Input, poolLabel, ownerKind, ownerName string) (string, time.Time) {
	var after time.Time
	var recorded *history.Pool
	for _, e := range in.Events {
		if e.Reason == history.Started && (after.IsZero() || e.First.Before(after)) {
			after = e.First
			if e.Repair != nil {
				recorded = e.Repair.Pool
			}
		}
	}
	if in.Node != nil {
		if st, err := record.Read(in.Node); err == nil && !st.Started.IsZero() {
			after = st.Started.Time
		}
	}
	if after.IsZero() {
		return "", after
	}
	if n := in.Node; n != nil {
		if poolLabel != "" && n.Labels[poolLabel] != "" {
			return poolLabel + "=" + n.Labels[poolLabel], after
		}
		if np := n.Labels[karpenter.NodePoolLabel]; np != "" {
			return karpenter.NodePoolLabel + "=" + np, after
		}
		return "", after
	}
	// Gone: the pool the controller recorded when the repair started; for
	// an earlier version's event, Karpenter's NodeClaim names
	// ("<nodepool>-<suffix>", generateName).
	if p := recorded; p != nil {
		switch {
		case p.Kind == pool.KindLabel && p.Label != "":
			return p.Label + "=" + p.Name, after
		case p.Kind == "NodePool" && p.Name != "":
			return karpenter.NodePoolLabel + "=" + p.Name, after
		}
	}
	if ownerKind == "NodeClaim" {
		if i := strings.LastIndex(ownerName, "-"); i > 0 {
			return karpenter.NodePoolLabel + "=" + ownerName[:i], after
		}
	}
	return "", after
}
