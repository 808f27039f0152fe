// Command kubectl-mend is the kubectl plugin of nodemend ("kubectl mend ...").
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"nodemend.dev/nodemend/pkg/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := cli.NewRootCommand(cli.StdStreams()).ExecuteContext(ctx)
	stop()
	if err != nil {
		cli.PrintError(os.Stderr, err)
		os.Exit(1)
	}
}
