// Package mountinfo reads /proc/<pid>/mountinfo, the mount table as a
// process sees it: the storage monitor's checks and the bundle's filesystem
// report read it with this one parser.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/internal/textcut"
)

// Entry is one line of /proc/<pid>/mountinfo
// (Documentation/filesystems/proc.rst, "3.5 /proc/<pid>/mountinfo"):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
type Entry struct {
	Major, Minor int
	// Point is the mount point, unescaped.
	Point string
	// MountOptions are the per-mount options (6), SuperOptions the
	// superblock's (11). "ro" in SuperOptions alone is the kernel's doing:
	// it remounts a filesystem read-only on an error without touching the
	// mount's own flag.
	MountOptions, SuperOptions []string
	// Optional are the optional fields (7): propagation, "shared:N",
	// "master:N", "propagate_from:N", "unbindable"; none for a private
	// mount.
	Optional       []string
	FSType, Source string
}

// maxLine bounds one line; mount points are at most PATH_MAX.
const maxLine = 64 << 10

// Parse parses a mountinfo file. Malformed lines are an error:
// the kernel never writes them, so the file is not what we think it is.
// A reader that prefers what it can read (a bundle) calls ParseLine on each
// line instead.
func Parse(data []byte) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" {
			continue
		}
		e, err := ParseLine(line)
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

// ParseLine parses one line of a mountinfo file.
func ParseLine(line string) (Entry, error) {
	f := strings.Split(line, " ")
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+4 {
		return Entry{}, fmt.Errorf("malformed %q: want 6+ fields, '-', 3 fields", textcut.Ellipsis(line, quoteLimit))
	}
	var e Entry
	maj, min, ok := strings.Cut(f[2], ":")
	var err1, err2 error
	e.Major, err1 = strconv.Atoi(maj)
	e.Minor, err2 = strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || e.Major < 0 || e.Minor < 0 {
		return Entry{}, fmt.Errorf("malformed device %q", textcut.Ellipsis(f[2], quoteLimit))
	}
	e.Point = Unescape(f[4])
	if !strings.HasPrefix(e.Point, "/") {
		return Entry{}, fmt.Errorf("mount point %q is not absolute", textcut.Ellipsis(e.Point, quoteLimit))
	}
	e.MountOptions = strings.Split(f[5], ",")
	e.Optional = f[6:sep]
	e.FSType = f[sep+1]
	e.Source = Unescape(f[sep+2])
	e.SuperOptions = strings.Split(f[sep+3], ",")
	return e, nil
}

// Unescape undoes the kernel's mangle() of paths in mount tables:
// space, tab, newline and backslash are written as \ooo.
func Unescape(s string) string {
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

// quoteLimit bounds the bad input an error message quotes: 80 bytes and the
// cut mark.
const quoteLimit = 80 + len(textcut.Mark)
