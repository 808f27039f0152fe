// Package cli is kubectl-mend: a cobra root with one file per command
// (logs, status, timeline, explain; their pure logic in the fleet, timeline
// and explain sub-packages), a shared client layer
// (client.go: kubeconfig flags, clients, API errors turned into advice) and
// a shared output layer (output.go).
package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
)

// Streams are where a command reads and writes.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// StdStreams are the process's standard streams.
func StdStreams() Streams { return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// NewRootCommand is `kubectl mend` with its subcommands.
func NewRootCommand(s Streams) *cobra.Command {
	g := &Global{loading: clientcmd.NewDefaultClientConfigLoadingRules()}
	root := &cobra.Command{
		Use:   "kubectl-mend",
		Short: "nodemend: diagnose and watch node health",
		Long: `kubectl mend works with nodemend (node health detection and auto-repair).

  kubectl mend status                 every node's health and repair state, and each pool's safety gate
  kubectl mend timeline NODE          what happened to a node, and how long each repair phase took
  kubectl mend explain pod/NAME       why a pod is pending or failing, and the fix
  kubectl mend explain node/NAME      why a node is not ready, not repaired or not consolidated
  kubectl mend explain nodepool/NAME  why a NodePool does not launch or repair
  kubectl mend logs NODE...           collect a redacted diagnostic bundle from nodes, without SSH
  kubectl mend capture NODE           capture packets on a node (tcpdump) and download them
  kubectl mend release NODE           return a node the repair ladder quarantined to service
  kubectl mend veto NODE              stop nodemend from repairing a node (--lift: let it again)
  kubectl mend repair NODE            ask nodemend to repair a node now (through the gate and the ladder)

Reference: docs/cli.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	g.bind(root)
	root.AddCommand(newLogsCommand(g, s), newCaptureCommand(g, s), newStatusCommand(g, s), newTimelineCommand(g, s), newExplainCommand(g, s),
		newReleaseCommand(g, s), newVetoCommand(g, s), newRepairCommand(g, s))
	return root
}
