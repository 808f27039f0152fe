package storage

import (
	"slices"
	"strings"

	"nodemend.dev/nodemend/internal/mountinfo"
	"nodemend.dev/nodemend/internal/textcut"
)

// readOnly reports whether opts has "ro".
func readOnly(opts []string) bool { return slices.Contains(opts, "ro") }

// coveringMount returns the index of the mount that holds path: the one
// with the longest mount point that is path or a parent of it; among
// mounts stacked on the same point, the last (topmost). -1 when none.
func coveringMount(mounts []mountinfo.Entry, path string) int {
	best, bestLen := -1, -1
	for i, m := range mounts {
		if !under(path, m.Point) {
			continue
		}
		if len(m.Point) >= bestLen {
			best, bestLen = i, len(m.Point)
		}
	}
	return best
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// quoteLimit bounds the bad input an error message quotes: 80 bytes and the
// cut mark.
const quoteLimit = 80 + len(textcut.Mark)
