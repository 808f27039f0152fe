package collectors

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
)

// sysctlLimit bounds the walk of /proc/sys (a few thousand on real hosts;
// many interfaces multiply net.*).
const sysctlLimit = 20000

func (e *Env) sysctl(ctx context.Context, out *collect.Output) error {
	root := e.hostPath("proc/sys")
	var lines []string
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			return nil
		}
		if n++; n > sysctlLimit {
			return fs.SkipAll
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil // write-only or not permitted
		}
		rel, _ := filepath.Rel(root, path)
		key := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		val := strings.Join(strings.Fields(string(data)), " ")
		lines = append(lines, key+" = "+val)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(lines)
	return out.WriteFile("sysctl.txt", []byte(strings.Join(lines, "\n")+"\n"))
}
