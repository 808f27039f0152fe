package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"nodemend.dev/nodemend/pkg/cli/explain"
	"nodemend.dev/nodemend/pkg/cli/fleet"
	"nodemend.dev/nodemend/pkg/repair/backend/karpenter"
	"nodemend.dev/nodemend/pkg/repair/pool"
)

type explainOptions struct {
	output     string
	controller controllerFlags
	now        func() time.Time
}

func newExplainCommand(g *Global, s Streams) *cobra.Command {
	o := &explainOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "explain (pod/NAME | node/NAME | nodepool/NAME)",
		Short: "Name the cause and the fix: a pending pod, a node that won't get ready or be repaired, a NodePool",
		Long: `explain reads what the cluster's components wrote (the scheduler's FailedScheduling, Karpenter's
events and NodeClaim/NodePool conditions, the kubelet's events, PVC and attach events, container
statuses, node taints and labels, nodemend's conditions and repair state) and names each cause
with its fix:

  pod/NAME       insufficient cpu/memory/extended resources (e.g. nvidia.com/gpu not registered),
                 untolerated taints, node selector/affinity mismatch, pod (anti-)affinity, topology
                 spread, requirements incompatible with every NodePool, subnet IP exhaustion, volume
                 attach limits and in-tree storage plugins, nodes not initialized, OOMKilled
                 containers, image platform mismatch
  node/NAME      not initialized (startup taints, NotReady), nodemend's failing conditions, its
                 repair state (tolerating, the safety gate, a veto, the pause), and what stops
                 consolidation or drains: do-not-disrupt, PodDisruptionBudgets with no disruption
                 left, pods without a controller
  nodepool/NAME  NodePool conditions and limits, disruption budgets, NodeClaims failing to launch,
                 nodemend's safety gate for the pool

The pod's namespace is -n (or the kubeconfig's).`,
		Example: `  kubectl mend explain pod/trainer-0 -n ml
  kubectl mend explain node/ip-10-0-1-23.ec2.internal
  kubectl mend explain nodepool/gpu -o json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, s, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: text)")
	o.controller.bind(fl)
	return cmd
}

// parseTarget reads "pod/NAME", "node NAME", "nodepool/NAME" and kubectl's
// short and plural forms.
func parseTarget(args []string) (kind, name string, err error) {
	var k string
	switch len(args) {
	case 1:
		var ok bool
		k, name, ok = strings.Cut(args[0], "/")
		if !ok {
			return "", "", fmt.Errorf("%q: name the object as TYPE/NAME (pod/NAME, node/NAME or nodepool/NAME)", args[0])
		}
	case 2:
		k, name = args[0], args[1]
	}
	switch strings.ToLower(k) {
	case "pod", "pods", "po":
		kind = "pod"
	case "node", "nodes", "no":
		kind = "node"
	case "nodepool", "nodepools", "nodepool.karpenter.sh", "nodepools.karpenter.sh":
		kind = "nodepool"
	default:
		return "", "", fmt.Errorf("cannot explain %q: pod, node or nodepool", k)
	}
	if name == "" {
		return "", "", fmt.Errorf("%s: name missing", kind)
	}
	return kind, name, nil
}

func (o *explainOptions) run(ctx context.Context, g *Global, s Streams, args []string) error {
	if err := checkOutput(o.output, OutputTable, OutputJSON, OutputYAML); err != nil {
		return err
	}
	kind, name, err := parseTarget(args)
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
	var r explain.Report
	switch kind {
	case "pod":
		ns, _, err := g.Namespace()
		if err != nil {
			return err
		}
		r, err = o.pod(ctx, c, ns, name)
		if err != nil {
			return err
		}
	case "node":
		if r, err = o.node(ctx, c, name); err != nil {
			return err
		}
	case "nodepool":
		if r, err = o.nodePool(ctx, c, name); err != nil {
			return err
		}
	}
	if o.output != OutputTable {
		return printStructured(s.Out, o.output, r)
	}
	return renderExplain(s.Out, g.Palette(s.Out), r)
}

func (o *explainOptions) pod(ctx context.Context, c *Clients, ns, name string) (explain.Report, error) {
	pod, err := c.Core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return explain.Report{}, Explain(err, "reading pod "+ns+"/"+name)
	}
	in := explain.PodInput{Pod: pod, Claims: map[string]*corev1.PersistentVolumeClaim{}, StorageClasses: map[string]*storagev1.StorageClass{},
		Volumes: map[string]*corev1.PersistentVolume{}}
	if in.Events, err = eventsAbout(ctx, c, "Pod", ns, name); err != nil {
		return explain.Report{}, err
	}
	nodes, err := c.Bulk.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return explain.Report{}, Explain(err, "listing nodes")
	}
	in.Nodes = nodes.Items
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := c.Core.CoreV1().PersistentVolumeClaims(ns).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return explain.Report{}, Explain(err, "reading persistentvolumeclaim "+v.PersistentVolumeClaim.ClaimName)
		}
		in.Claims[pvc.Name] = pvc
		if evs, err := eventsAbout(ctx, c, "PersistentVolumeClaim", ns, pvc.Name); err == nil {
			in.ClaimEvents = append(in.ClaimEvents, evs...)
		}
		if pvc.Spec.VolumeName != "" {
			pv, err := c.Core.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			switch {
			case err == nil:
				in.Volumes[pvc.Name] = pv
			case !optionalRead(err):
				return explain.Report{}, Explain(err, "reading persistentvolume "+pvc.Spec.VolumeName)
			}
		}
		if sc := pvc.Spec.StorageClassName; sc != nil && *sc != "" && in.StorageClasses[*sc] == nil {
			obj, err := c.Core.StorageV1().StorageClasses().Get(ctx, *sc, metav1.GetOptions{})
			if err == nil {
				in.StorageClasses[*sc] = obj
			} else if !apierrors.IsNotFound(err) {
				return explain.Report{}, Explain(err, "reading storageclass "+*sc)
			}
		}
	}
	if in.NodeClaims, in.Karpenter, err = listNodeClaims(ctx, c, ""); err != nil {
		return explain.Report{}, err
	}
	if err := podStorageAndLimits(ctx, c, &in); err != nil {
		return explain.Report{}, err
	}
	return explain.Pod(in), nil
}

// optionalRead reports errors that leave an input of explain unknown
// rather than fail it: what the caller may not read, or what is not
// there. explain then says what it could not see.
func optionalRead(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta404(err)
}

// podStorageAndLimits reads the installed CSI drivers, the CSINode of the
// pod's node and the namespace's LimitRanges.
func podStorageAndLimits(ctx context.Context, c *Clients, in *explain.PodInput) error {
	drivers, err := c.Core.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		in.CSIDrivers = map[string]bool{}
		for _, d := range drivers.Items {
			in.CSIDrivers[d.Name] = true
		}
	case !optionalRead(err):
		return Explain(err, "listing csidrivers")
	}
	if node := in.Pod.Spec.NodeName; node != "" {
		csi, err := c.Core.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil:
			in.CSINode = csi
		case !optionalRead(err):
			return Explain(err, "reading csinode "+node)
		}
	}
	lrs, err := c.Core.CoreV1().LimitRanges(in.Pod.Namespace).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		in.LimitRanges = append([]corev1.LimitRange{}, lrs.Items...)
	case !optionalRead(err):
		return Explain(err, "listing limitranges")
	}
	return nil
}

func (o *explainOptions) node(ctx context.Context, c *Clients, name string) (explain.Report, error) {
	f, err := loadFleet(ctx, c, o.controller)
	if err != nil {
		return explain.Report{}, err
	}
	var node *corev1.Node
	for _, n := range f.nodes {
		if n.Name == name {
			node = n
		}
	}
	if node == nil {
		return explain.Report{}, fmt.Errorf("node %q not found (for a node that is gone: kubectl mend timeline %s)", name, name)
	}
	fin := f.input(o.controller, o.now())
	rep := fleet.Assess(fin)
	in := explain.NodeInput{Node: node, PauseConfigMap: o.controller.namespace + "/" + o.controller.pauseConfigMap,
		RepairsControlPlane: fin.Policies.For(node.Labels).RepairControlPlane}
	for _, row := range rep.Nodes {
		if row.Name == name {
			in.Repair = row
		}
	}
	for _, g := range rep.Pools {
		if g.Name == in.Repair.Pool {
			in.Pool = g
		}
	}
	if in.Events, err = eventsAbout(ctx, c, "Node", "", name); err != nil {
		return explain.Report{}, err
	}
	pods, err := c.Bulk.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return explain.Report{}, Explain(err, "listing the node's pods")
	}
	in.Pods = pods.Items
	pdbs, err := c.Core.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return explain.Report{}, Explain(err, "listing poddisruptionbudgets")
	}
	in.PDBs = pdbs.Items
	if in.NodeClaims, in.Karpenter, err = listNodeClaims(ctx, c, ""); err != nil {
		return explain.Report{}, err
	}
	if kind, _, claim := ownerOf(node, nil); kind == "NodeClaim" {
		for i := range in.NodeClaims {
			if in.NodeClaims[i].Name == claim {
				in.NodeClaim = &in.NodeClaims[i]
			}
		}
		if evs, err := eventsAbout(ctx, c, "NodeClaim", "", claim); err == nil {
			in.Events = append(in.Events, evs...)
		}
	}
	return explain.Node(in), nil
}

func (o *explainOptions) nodePool(ctx context.Context, c *Clients, name string) (explain.Report, error) {
	u, err := c.Dynamic.Resource(nodePoolGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return explain.Report{}, fmt.Errorf("nodepool %q not found (or Karpenter is not installed)", name)
		}
		return explain.Report{}, Explain(err, "reading nodepool "+name)
	}
	in := explain.NodePoolInput{Pool: nodePoolFrom(u)}
	if in.Events, err = eventsAbout(ctx, c, "NodePool", "", name); err != nil {
		return explain.Report{}, err
	}
	if in.NodeClaims, _, err = listNodeClaims(ctx, c, karpenter.NodePoolLabel+"="+name); err != nil {
		return explain.Report{}, err
	}
	f, err := loadFleet(ctx, c, o.controller)
	if err != nil {
		return explain.Report{}, err
	}
	rep := fleet.Assess(f.input(o.controller, o.now()))
	key := pool.Pool{Group: karpenter.Group, Kind: "NodePool", Name: name}.String()
	if o.controller.poolLabel != "" {
		key = pool.Pool{Kind: pool.KindLabel, Label: o.controller.poolLabel, Name: name}.String()
	}
	for _, g := range rep.Pools {
		if g.Name == key {
			in.Gate = g
		}
	}
	for _, n := range rep.Nodes {
		if n.Pool == key {
			in.Nodes = append(in.Nodes, n)
		}
	}
	return explain.NodePoolReport(in), nil
}

// listNodeClaims lists Karpenter's NodeClaims; served is false when
// Karpenter is not installed.
func listNodeClaims(ctx context.Context, c *Clients, selector string) (claims []explain.NodeClaim, served bool, err error) {
	list, err := c.Dynamic.Resource(nodeClaimGVR).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsNotFound(err) || meta404(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, Explain(err, "listing nodeclaims.karpenter.sh")
	}
	out := make([]explain.NodeClaim, 0, len(list.Items))
	for i := range list.Items {
		u := &list.Items[i]
		nc := explain.NodeClaim{Name: u.GetName(), NodePool: u.GetLabels()[karpenter.NodePoolLabel]}
		nc.NodeName, _, _ = unstructured.NestedString(u.Object, "status", "nodeName")
		nc.ProviderID, _, _ = unstructured.NestedString(u.Object, "status", "providerID")
		nc.Conditions = explainConditions(u)
		out = append(out, nc)
	}
	return out, true, nil
}

func explainConditions(u *unstructured.Unstructured) []explain.Condition {
	var out []explain.Condition
	for _, c := range conditionsOf(u) {
		out = append(out, explain.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, Time: c.Time})
	}
	return out
}

func nodePoolFrom(u *unstructured.Unstructured) explain.NodePool {
	p := explain.NodePool{Name: u.GetName(), Conditions: explainConditions(u)}
	p.Limits = resourceList(u, "spec", "limits")
	p.Usage = resourceList(u, "status", "resources")
	budgets, _, _ := unstructured.NestedSlice(u.Object, "spec", "disruption", "budgets")
	for _, b := range budgets {
		if m, ok := b.(map[string]any); ok {
			if n, ok := m["nodes"].(string); ok {
				p.BudgetNodes = append(p.BudgetNodes, n)
			}
		}
	}
	return p
}

func resourceList(u *unstructured.Unstructured, path ...string) corev1.ResourceList {
	m, _, _ := unstructured.NestedMap(u.Object, path...)
	out := corev1.ResourceList{}
	for k, v := range m {
		s := fmt.Sprint(v)
		if q, err := parseQuantity(s); err == nil {
			out[corev1.ResourceName(k)] = q
		}
	}
	return out
}
