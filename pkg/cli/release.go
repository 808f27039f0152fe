package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodemend.dev/nodemend/pkg/repair/record"
)

// A person's acts on a repair are annotations on the Node that only
// identities holding a verb on the virtual resource nodes.nodemend.dev may
// write (docs/security.md#a-persons-acts): the chart's admission policy
// checks it with the authorizer, and these commands ask first, so that a
// caller without it is told which permission is missing before anything is
// sent.
const (
	actGroup    = "nodemend.dev"
	actResource = "nodes"
	// operatorRole grants every act (the chart's aggregated ClusterRole).
	operatorRole = "nodemend-repair-operator"
	// repairNowAnnotation asks for a repair now (docs/repair.md).
	repairNowAnnotation = record.RepairNowAnnotation
)

// act is one person's act: the verb that licenses it and the annotation
// it writes.
type act struct {
	verb, annotation string
	// remove: take the annotation away instead of setting it.
	remove bool
	value  string
	// check refuses the act on node before it is written ("" : go on).
	check func(node *corev1.Node) error
	// done says what was asked, next what the controller does about it.
	done, next string
}

type actOptions struct {
	reason string
	remove bool
	now    func() time.Time
}

// value is the annotation's value: the reason, and the time, so that the
// record says who or why and when.
func (o *actOptions) value() string {
	v := o.now().UTC().Format(time.RFC3339)
	if o.reason != "" {
		v = o.reason + " (" + v + ")"
	}
	return v
}

const needs = `

Needs: get and patch nodes, and the permission %s on nodes.nodemend.dev (ClusterRole
nodemend-repair-operator; docs/security.md). A caller without it is told so before anything
is written.`

func newReleaseCommand(g *Global, s Streams) *cobra.Command {
	o := &actOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "release NODE",
		Short: "Return a quarantined node to service",
		Long: `release tells nodemend-controller that a person has dealt with a node the repair ladder
quarantined (cordoned and tainted nodemend.dev/repair): it sets the annotation
nodemend.dev/release on the Node, and the controller removes the taint, uncordons the node
if nodemend had cordoned it, and forgets the ladder (the next fault starts a new one) — once
the node's conditions are healthy: the controller lifts its cordon only then. The node counts
as unhealthy for the safety gate until it is back in service.

Only a quarantined node can be released; a repair in another phase is stopped with
kubectl mend veto instead (docs/repair.md).` + fmt.Sprintf(needs, "release"),
		Example: `  kubectl mend release gpu-node-7 --reason "GPU reseated, INC-4711"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAct(cmd.Context(), g, s, args[0], act{verb: "release", annotation: record.ReleaseAnnotation, value: o.value(),
				check: func(node *corev1.Node) error {
					phase := repairPhase(node)
					if phase == record.PhaseQuarantined {
						return nil
					}
					if phase == record.PhaseNone {
						return fmt.Errorf("node %s is not quarantined (no repair in progress)", node.Name)
					}
					return fmt.Errorf("node %s is not quarantined (repair phase %s); to stop a repair: kubectl mend veto %s", node.Name, phase, node.Name)
				},
				done: "release requested", next: "nodemend-controller returns it to service once its conditions are healthy"})
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why the node may return to service (kept in the annotation and the controller's event)")
	return cmd
}

func newVetoCommand(g *Global, s Streams) *cobra.Command {
	o := &actOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "veto NODE",
		Short: "Stop nodemend from repairing a node (or, with --lift, let it again)",
		Long: `veto sets the annotation nodemend.dev/do-not-repair on the Node, its value the reason and
the time: nodemend-controller starts no repair of the node and halts one in progress before
its next step (the node stays tainted). --lift removes the veto.` + fmt.Sprintf(needs, "veto"),
		Example: `  kubectl mend veto gpu-node-7 --reason "vendor is debugging the GPU, INC-4711"
  kubectl mend veto gpu-node-7 --lift`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := act{verb: "veto", annotation: record.VetoAnnotation, value: o.value(), done: "vetoed", next: "nodemend-controller does not repair it"}
			if o.remove {
				a = act{verb: "veto", annotation: record.VetoAnnotation, remove: true, done: "veto lifted", next: "nodemend-controller may repair it again"}
			}
			return runAct(cmd.Context(), g, s, args[0], a)
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why the node must not be repaired")
	cmd.Flags().BoolVar(&o.remove, "lift", false, "remove the veto")
	return cmd
}

func newRepairCommand(g *Global, s Streams) *cobra.Command {
	o := &actOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "repair NODE",
		Short: "Ask nodemend to repair a node now",
		Long: `repair sets the annotation nodemend.dev/repair-now on the Node (as Cluster API's
remediate-machine annotation): nodemend-controller repairs the node without waiting for the
toleration to pass — still through the safety gate (veto, pause, pool and zone limits) and the
node's ladder, and only if a rule of its repair policy flags one of its conditions now. The
controller removes the annotation when the repair starts or is refused (an event says why).` + fmt.Sprintf(needs, "repair"),
		Example: `  kubectl mend repair gpu-node-7 --reason "XID 79 seen by the vendor tool, INC-4711"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAct(cmd.Context(), g, s, args[0], act{verb: "repair", annotation: repairNowAnnotation, value: o.value(),
				check: func(node *corev1.Node) error {
					if phase := repairPhase(node); phase != record.PhaseNone {
						return fmt.Errorf("node %s is under repair already (repair phase %s)", node.Name, phase)
					}
					return nil
				},
				done: "repair requested", next: "nodemend-controller repairs it if its policy flags a condition and the gate allows"})
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why the node must be repaired now")
	return cmd
}

// repairPhase is the node's repair phase as nodemend-controller recorded
// it in the node's repair record ("" when none, or when the record cannot
// be read: the controller leaves such a node alone too).
func repairPhase(node *corev1.Node) record.Phase {
	return record.PhaseOf(node)
}

func runAct(ctx context.Context, g *Global, s Streams, name string, a act) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	if err := mayAct(ctx, c, name, a.verb); err != nil {
		return err
	}
	node, err := c.Core.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Explain(err, "get node "+name)
	}
	if a.check != nil {
		if err := a.check(node); err != nil {
			return err
		}
	}
	var value any = a.value
	if a.remove {
		if _, ok := node.Annotations[a.annotation]; !ok {
			fmt.Fprintf(s.Out, "node/%s has no %s\n", name, a.annotation)
			return nil
		}
		value = nil
	}
	// Guarded by the resourceVersion read: the node is still as checked
	// when the act is written.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": node.ResourceVersion,
		"annotations":     map[string]any{a.annotation: value},
	}})
	if _, err := c.Core.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("node %s changed meanwhile; run the command again", name)
		}
		return explainAct(err, name, a.verb)
	}
	if a.remove {
		fmt.Fprintf(s.Out, "node/%s %s (%s removed); %s\n", name, a.done, a.annotation, a.next)
		return nil
	}
	fmt.Fprintf(s.Out, "node/%s %s (%s=%q); %s\n", name, a.done, a.annotation, a.value, a.next)
	return nil
}

// mayAct asks the API server whether the caller holds verb on
// nodes.nodemend.dev/NAME, and says which permission is missing if not.
// A review that cannot be made (an old server, a policy against it) leaves
// the answer to the admission policy.
func mayAct(ctx context.Context, c *Clients, name, verb string) error {
	r, err := c.Core.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: actGroup, Resource: actResource, Name: name, Verb: verb,
		}},
	}, metav1.CreateOptions{})
	if err != nil || r.Status.Allowed {
		return nil
	}
	return missingPermission(name, verb)
}

func missingPermission(name, verb string) error {
	return fmt.Errorf("you may not %s node %s: it needs the permission %q on %s.%s/%s, which you do not have "+
		"(a cluster admin grants it with the ClusterRole %s: docs/security.md#a-persons-acts)",
		verb, name, verb, actResource, actGroup, name, operatorRole)
}

// explainAct turns the admission policy's refusal into the missing
// permission; other errors as Explain does.
func explainAct(err error, name, verb string) error {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "needs the permission "+verb+" on nodes.nodemend.dev") {
		return missingPermission(name, verb)
	}
	return Explain(err, "patch node "+name)
}
