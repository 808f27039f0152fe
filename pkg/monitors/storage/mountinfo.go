package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/internal/textcut"
)

// mountEntry is one line of /proc/<pid>/mountinfo
// (Documentation/filesystems/proc.rst, "3.5 /proc/<pid>/mountinfo"):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
type mountEntry struct {
	Major, Minor int
	// Point is the mount point, unescaped.
	Point string
	// MountOptions are the per-mount options (6), SuperOptions the
	// superblock's (11). "ro" in SuperOptions alone is the kernel's doing:
	// it remounts a filesystem read-only on an error without touching the
	// mount's own flag.
	MountOptions, SuperOptions []string
	FSType, Source             string
}

// readOnly reports whether opts has "ro".
func readOnly(opts []string) bool { return slices.Contains(opts, "ro") }

// maxMountinfoLine bounds one line; mount points are at most PATH_MAX.
const maxMountinfoLine = 64 << 10

// parseMountinfo parses a mountinfo file. Malformed lines are an error:
// the kernel never writes them, so the file is not what we think it is.
func parseMountinfo(data []byte) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxMountinfoLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" {
			continue
		}
		e, err := parseMountinfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

func parseMountinfoLine(line string) (mountEntry, error) {
	f := strings.Split(line, " ")
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+4 {
		return mountEntry{}, fmt.Errorf("malformed %q: want 6+ fields, '-', 3 fields", textcut.Ellipsis(line, quoteLimit))
	}
	var e mountEntry
	maj, min, ok := strings.Cut(f[2], ":")
	var err1, err2 error
	e.Major, err1 = strconv.Atoi(maj)
	e.Minor, err2 = strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || e.Major < 0 || e.Minor < 0 {
		return mountEntry{}, fmt.Errorf("malformed device %q", textcut.Ellipsis(f[2], quoteLimit))
	}
	e.Point = unescapeOctal(f[4])
	if !strings.HasPrefix(e.Point, "/") {
		return mountEntry{}, fmt.Errorf("mount point %q is not absolute", textcut.Ellipsis(e.Point, quoteLimit))
	}
	e.MountOptions = strings.Split(f[5], ",")
	e.FSType = f[sep+1]
	e.Source = unescapeOctal(f[sep+2])
	e.SuperOptions = strings.Split(f[sep+3], ",")
	return e, nil
}

// unescapeOctal undoes the kernel's mangle() of paths in mount tables:
// space, tab, newline and backslash are written as \ooo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// coveringMount returns the index of the mount that holds path: the one
// with the longest mount point that is path or a parent of it; among
// mounts stacked on the same point, the last (topmost). -1 when none.
func coveringMount(mounts []mountEntry, path string) int {
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
