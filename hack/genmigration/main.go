// Command genmigration regenerates the "Coming from EKS" section of
// docs/engines.md (hack/genmigration/migration):
//
//	go run ./hack/genmigration
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"nodemend.dev/nodemend/hack/genmigration/migration"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	page, err := migration.Render(*root)
	if err == nil {
		err = os.WriteFile(filepath.Join(*root, migration.DocPath), page, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genmigration:", err)
		os.Exit(1)
	}
}
