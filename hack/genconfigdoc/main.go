// Command genconfigdoc regenerates docs/configuration.md, the agent
// configuration reference, from the config types (pkg/agent/config):
//
//	go run ./hack/genconfigdoc
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"nodemend.dev/nodemend/hack/genconfigdoc/configdoc"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	page, err := configdoc.Render(*root)
	if err == nil {
		err = os.WriteFile(filepath.Join(*root, configdoc.DocPath), page, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genconfigdoc:", err)
		os.Exit(1)
	}
}
