package imagebuild

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"
)

var epoch = time.Unix(1700000000, 0).UTC()

// fixtureRootfs is a small root file system as a bootstrap tool writes
// it: "./"-prefixed names, owner names, build-time timestamps, PAX records,
// a hard link, a symlink, a device node, a setuid binary and a file
// capability.
type fixtureFile struct {
	hdr  tar.Header
	data string
}

func fixtureRootfs(order []int, when time.Time) []byte {
	files := []fixtureFile{
		{tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}, ""},
		{tar.Header{Typeflag: tar.TypeDir, Name: "./etc/", Mode: 0o755}, ""},
		{tar.Header{Typeflag: tar.TypeReg, Name: "./etc/passwd", Mode: 0o644}, "root:x:0:0:root:/root:/bin/sh\n"},
		{tar.Header{Typeflag: tar.TypeReg, Name: "./etc/shadow", Mode: 0o640, Gid: 42, Gname: "shadow"}, "root:*::0:99999:7:::\n"},
		{tar.Header{Typeflag: tar.TypeDir, Name: "./usr/", Mode: 0o755}, ""},
		{tar.Header{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755}, ""},
		{tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/su", Mode: 0o4755}, "\x7fELF su"},
		{tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/ping", Mode: 0o755, PAXRecords: map[string]string{
			"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00",
			"SCHILY.xattr.security.selinux":    "system_u:object_r:bin_t:s0",
		}}, "\x7fELF ping"},
		{tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/perl", Mode: 0o755}, "\x7fELF perl"},
		{tar.Header{Typeflag: tar.TypeLink, Name: "./usr/bin/perl5.36.0", Linkname: "./usr/bin/perl"}, ""},
		{tar.Header{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin", Mode: 0o777}, ""},
		{tar.Header{Typeflag: tar.TypeDir, Name: "./dev/", Mode: 0o755}, ""},
		{tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, ""},
		{tar.Header{Typeflag: tar.TypeDir, Name: "./usr/bin-extra/", Mode: 0o755}, ""},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, i := range order {
		f := files[i]
		h := f.hdr
		h.ModTime = when.Add(time.Duration(n) * time.Second)
		h.AccessTime, h.ChangeTime = when, when
		h.Uname, h.Format = "root", tar.FormatPAX
		if h.Gname == "" {
			h.Gname = "root"
		}
		h.Size = int64(len(f.data))
		if err := tw.WriteHeader(&h); err != nil {
			panic(err)
		}
		tw.Write([]byte(f.data))
	}
	tw.Close()
	return buf.Bytes()
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func layerOf(t *testing.T, rootfs []byte) []byte {
	t.Helper()
	entries, err := ReadTar(bytes.NewReader(rootfs))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := CompressedLayer(entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return gz
}

// The same files give the same layer bytes, whatever order, timestamps and
// owner names the bootstrap wrote; a different file gives another layer.
func TestLayerIsReproducible(t *testing.T) {
	order := identity(14)
	shuffled := slices.Clone(order)
	slices.Reverse(shuffled[1:]) // directories after their contents, the hard link before its target
	a := layerOf(t, fixtureRootfs(order, time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)))
	b := layerOf(t, fixtureRootfs(shuffled, time.Date(2025, 12, 3, 7, 30, 0, 0, time.UTC)))
	if !bytes.Equal(a, b) {
		t.Fatalf("two builds of the same files differ: sha256 %x and %x", sha256.Sum256(a), sha256.Sum256(b))
	}
	entries, _ := ReadTar(bytes.NewReader(fixtureRootfs(order, epoch)))
	for i := range entries {
		if entries[i].Header.Name == "etc/passwd" {
			entries[i].Data = []byte("root:x:0:0:root:/root:/bin/bash\n")
		}
	}
	c, err := CompressedLayer(entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, c) {
		t.Fatal("a changed file gave the same layer")
	}
}

// A normalized layer has its entries in path order with parents first,
// one timestamp, numeric owners only, file capabilities but no other PAX
// records, mode bits including setuid, and hard links after their target.
func TestNormalize(t *testing.T) {
	order := identity(14)
	slices.Reverse(order)
	entries, err := ReadTar(bytes.NewReader(fixtureRootfs(order, time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	norm, err := Normalize(entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	seen := map[string]bool{}
	for _, e := range norm {
		h := e.Header
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner names %q %q", h.Name, h.Uname, h.Gname)
		}
		if h.Typeflag == tar.TypeLink && !seen[h.Linkname] {
			t.Errorf("%s: hard link before its target %s", h.Name, h.Linkname)
		}
		seen[h.Name] = true
		switch h.Name {
		case "usr/bin/ping":
			want := map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00"}
			if fmt.Sprint(h.PAXRecords) != fmt.Sprint(want) {
				t.Errorf("ping: PAX records %q, want only the capability", h.PAXRecords)
			}
		case "usr/bin/su":
			if h.Mode != 0o4755 {
				t.Errorf("su: mode %o, want setuid 4755", h.Mode)
			}
		case "etc/shadow":
			if h.Gid != 42 {
				t.Errorf("shadow: gid %d, want 42", h.Gid)
			}
		case "dev/null":
			if h.Typeflag != tar.TypeChar || h.Devmajor != 1 || h.Devminor != 3 {
				t.Errorf("dev/null: %+v", h)
			}
		}
	}
	want := []string{"bin", "dev", "dev/null", "etc", "etc/passwd", "etc/shadow", "usr", "usr/bin", "usr/bin/perl", "usr/bin/perl5.36.0", "usr/bin/ping", "usr/bin/su", "usr/bin-extra"}
	if !slices.Equal(names, want) {
		t.Errorf("entries\n%q, want\n%q", names, want)
	}
}

// When a hard link sorts before its target, the link's path becomes the
// file and the target links to it.
func TestNormalizeLeadsHardLinkGroups(t *testing.T) {
	entries := []Entry{
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/z", Mode: 0o755, Size: 4}, Data: []byte("data")},
		{Header: tar.Header{Typeflag: tar.TypeLink, Name: "usr/bin/a", Linkname: "usr/bin/z"}},
		{Header: tar.Header{Typeflag: tar.TypeLink, Name: "usr/bin/m", Linkname: "usr/bin/z"}},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr", Mode: 0o755}},
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr/bin", Mode: 0o755}},
	}
	norm, err := Normalize(entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range norm {
		got[e.Header.Name] = fmt.Sprintf("%c %s %s", e.Header.Typeflag, e.Header.Linkname, e.Data)
	}
	want := map[string]string{
		"usr": "5  ", "usr/bin": "5  ",
		"usr/bin/a": "0  data", "usr/bin/m": "1 usr/bin/a ", "usr/bin/z": "1 usr/bin/a ",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// A link to nothing is an error, not a broken layer.
	if _, err := Normalize([]Entry{{Header: tar.Header{Typeflag: tar.TypeLink, Name: "a", Linkname: "missing"}}}, epoch); err == nil {
		t.Error("a hard link to a missing file was accepted")
	}
}

// FileEntries adds the parent directories of files and keeps later
// entries over earlier ones of the same path.
func TestFileEntries(t *testing.T) {
	norm, err := Normalize(FileEntries([]File{
		{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("v1")},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
		{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("v2")},
		{Path: "/etc/alternatives/awk", Symlink: "/usr/bin/mawk", Mode: 0o777},
	}), epoch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range norm {
		got = append(got, fmt.Sprintf("%s %o %d %s%s", e.Header.Name, e.Header.Mode, e.Header.Uid, e.Data, e.Header.Linkname))
	}
	want := []string{"etc 755 0 ", "etc/alternatives 755 0 ", "etc/alternatives/awk 777 0 /usr/bin/mawk", "home 755 0 ",
		"home/nonroot 700 65532 ", "usr 755 0 ", "usr/local 755 0 ", "usr/local/bin 755 0 ", "usr/local/bin/tool 755 0 v2"}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q, want\n%q", got, want)
	}
}
