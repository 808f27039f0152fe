package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodemend.dev/nodemend/pkg/repair/workflow"
)

type releaseOptions struct {
	reason string
	now    func() time.Time
}

func newReleaseCommand(g *Global, s Streams) *cobra.Command {
	o := &releaseOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "release NODE",
		Short: "Return a quarantined node to service",
		Long: `release tells nodemend-controller that a person has dealt with a node the repair ladder
quarantined (cordoned and tainted nodemend.dev/repair): it sets the annotation
nodemend.dev/release on the Node, and the controller removes the taint, uncordons the node
if nodemend had cordoned it, and forgets the ladder (the next fault starts a new one).
The node counts as unhealthy for the safety gate until then.

Only a quarantined node can be released; a repair in another phase is stopped with the
nodemend.dev/do-not-repair annotation instead (docs/repair.md).

Needs: get and patch nodes.`,
		Example: `  kubectl mend release gpu-node-7 --reason "GPU reseated, INC-4711"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, s, args[0])
		},
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "why the node may return to service (kept in the annotation and the controller's event)")
	return cmd
}

func (o *releaseOptions) run(ctx context.Context, g *Global, s Streams, name string) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	node, err := c.Core.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Explain(err, "get node "+name)
	}
	phase := workflow.Phase(node.Annotations[workflow.PhaseAnnotation])
	if phase != workflow.PhaseQuarantined {
		if phase == workflow.PhaseNone {
			return fmt.Errorf("node %s is not quarantined (no repair in progress)", name)
		}
		return fmt.Errorf("node %s is not quarantined (repair phase %s); to stop a repair, annotate it %s", name, phase, workflow.VetoAnnotation)
	}
	value := o.now().UTC().Format(time.RFC3339)
	if o.reason != "" {
		value = o.reason + " (" + value + ")"
	}
	// Guarded by the resourceVersion read: the node must still be
	// quarantined when the release is written.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": node.ResourceVersion,
		"annotations":     map[string]string{workflow.ReleaseAnnotation: value},
	}})
	if _, err := c.Core.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("node %s changed while it was being released; run the command again", name)
		}
		return Explain(err, "patch node "+name)
	}
	fmt.Fprintf(s.Out, "node/%s release requested (%s=%q); nodemend-controller returns it to service\n", name, workflow.ReleaseAnnotation, value)
	return nil
}
