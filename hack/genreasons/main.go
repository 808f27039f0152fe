// Command genreasons regenerates pkg/health/reasons_generated.go,
// docs/reasons.md, the chart's table of quiet periods
// (deploy/helm/nodemend/files/quiet-periods.yaml) and the generated tables
// of docs/accelerators.md from
// pkg/health/reasons.yaml, and pins reasons added since
// the last run in pkg/health/reasons.lock once they are compatible with it.
// With -update-lock it rewrites the lock whole, accepting a breaking change
// (do that only on purpose, with a CHANGELOG entry).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"nodemend.dev/nodemend/hack/genreasons/registry"
)

func main() {
	root := flag.String("root", ".", "repository root")
	updateLock := flag.Bool("update-lock", false, "rewrite reasons.lock from the registry")
	flag.Parse()
	if err := run(*root, *updateLock); err != nil {
		fmt.Fprintln(os.Stderr, "genreasons:", err)
		os.Exit(1)
	}
}

func run(root string, updateLock bool) error {
	data, err := os.ReadFile(filepath.Join(root, "pkg/health/reasons.yaml"))
	if err != nil {
		return err
	}
	f, err := registry.Parse(data)
	if err != nil {
		return err
	}
	goSrc, err := f.RenderGo()
	if err != nil {
		return err
	}
	page, err := os.ReadFile(filepath.Join(root, "docs/accelerators.md"))
	if err != nil {
		return err
	}
	accel, err := f.RenderAccelerators(page)
	if err != nil {
		return err
	}
	quiet, err := f.RenderQuietPeriods()
	if err != nil {
		return err
	}
	writes := map[string][]byte{
		registry.QuietPeriodsPath:         quiet,
		"pkg/health/reasons_generated.go": goSrc,
		"docs/reasons.md":                 f.RenderDocs(),
		"docs/accelerators.md":            accel,
	}
	lockPath := filepath.Join(root, "pkg/health/reasons.lock")
	if updateLock {
		writes["pkg/health/reasons.lock"] = f.RenderLock()
	} else if lockData, err := os.ReadFile(lockPath); err == nil {
		lock, err := registry.ParseLock(lockData)
		if err != nil {
			return err
		}
		if err := f.CheckCompatible(lock); err != nil {
			return err
		}
		// Compatible means every pinned reason is still there unchanged, so
		// the registry's lock is the old one plus the reasons added since:
		// a reason is pinned from the first generate that ships it.
		writes["pkg/health/reasons.lock"] = f.RenderLock()
	} else if os.IsNotExist(err) {
		writes["pkg/health/reasons.lock"] = f.RenderLock()
	}
	for rel, content := range writes {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}
