// Package imagebuild assembles OCI images without a container engine:
// reproducible layer tarballs (entries in one order, one timestamp, numeric
// owners, nothing of the build machine), image configs, archives that
// containerd (`ctr images import`) and Docker (`docker load`) read, and
// pushes to a registry. It uses go-containerregistry for everything the OCI
// image specification defines (digests, manifests, configs, the registry
// protocol); what it adds is the normalization that makes two builds of
// the same inputs produce the same digests.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"
)

// Entry is one file system object of a layer: a header and, for regular
// files, the content.
type Entry struct {
	Header tar.Header
	Data   []byte
}

// keptPAXRecords are the extended attributes a layer carries: file
// capabilities are part of a package's contents (dpkg sets them); every
// other record is build-machine noise (atime, ctime, SELinux labels).
var keptPAXRecords = []string{"SCHILY.xattr.security.capability"}

// CleanName turns a tar member name ("./usr/bin/", "/etc/passwd") into the
// relative, slash-free-ended form layers use ("usr/bin", "etc/passwd"); the
// root itself is "".
func CleanName(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}

// ReadTar reads a tar stream into entries, with cleaned names. The root
// directory entry is dropped: a layer's root belongs to the runtime.
func ReadTar(r io.Reader) ([]Entry, error) {
	tr := tar.NewReader(r)
	var out []Entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading tar: %w", err)
		}
		e := Entry{Header: *h}
		e.Header.Name = CleanName(h.Name)
		if e.Header.Name == "" {
			continue
		}
		if h.Typeflag == tar.TypeLink {
			e.Header.Linkname = CleanName(h.Linkname)
		}
		if h.Typeflag == tar.TypeReg {
			if e.Data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("reading %s: %w", h.Name, err)
			}
		}
		out = append(out, e)
	}
}

// File is a file to place in a layer at an absolute path.
type File struct {
	Path     string
	Mode     int64 // permission bits (and setuid/setgid/sticky)
	UID, GID int
	Data     []byte
	Dir      bool   // a directory; Data is ignored
	Symlink  string // a symbolic link to this target; Data is ignored
}

// FileEntries turns files into entries, adding their parent directories
// (root-owned, 0755) where the list does not declare them, so a layer can
// be unpacked on its own.
func FileEntries(files []File) []Entry {
	declared := map[string]bool{}
	for _, f := range files {
		if f.Dir {
			declared[CleanName(f.Path)] = true
		}
	}
	var out []Entry
	for _, f := range files {
		name := CleanName(f.Path)
		for dir := path.Dir(name); dir != "." && !declared[dir]; dir = path.Dir(dir) {
			declared[dir] = true
			out = append(out, Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}})
		}
		h := tar.Header{Name: name, Mode: f.Mode, Uid: f.UID, Gid: f.GID}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
			out = append(out, Entry{Header: h})
		case f.Symlink != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Symlink
			out = append(out, Entry{Header: h})
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			out = append(out, Entry{Header: h, Data: f.Data})
		}
	}
	return out
}

// compareNames orders paths component by component, so a directory comes
// right before its contents and every parent before its children.
func compareNames(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

// Normalize returns the entries a reproducible layer holds: one entry per
// path (a later entry replaces an earlier one, as a later package or file
// would), in component order, every timestamp set to epoch, owners numeric
// only, no PAX records beyond file capabilities, and each hard-link group
// led by its first path in that order (a link must follow its target).
func Normalize(entries []Entry, epoch time.Time) ([]Entry, error) {
	byName := map[string]int{}
	var out []Entry
	for _, e := range entries {
		h := e.Header
		norm := tar.Header{
			Typeflag: h.Typeflag,
			Name:     h.Name,
			Linkname: h.Linkname,
			Mode:     h.Mode & 0o7777,
			Uid:      h.Uid,
			Gid:      h.Gid,
			ModTime:  epoch,
			Devmajor: h.Devmajor,
			Devminor: h.Devminor,
		}
		switch h.Typeflag {
		case tar.TypeReg:
			norm.Typeflag, norm.Size = tar.TypeReg, int64(len(e.Data))
		case tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		default:
			return nil, fmt.Errorf("%s: unsupported tar entry type %q", h.Name, h.Typeflag)
		}
		for _, k := range keptPAXRecords {
			if v, ok := h.PAXRecords[k]; ok {
				if norm.PAXRecords == nil {
					norm.PAXRecords = map[string]string{}
				}
				norm.PAXRecords[k] = v
			}
		}
		if norm.Typeflag != tar.TypeReg {
			e.Data = nil
		}
		if i, ok := byName[norm.Name]; ok {
			out[i] = Entry{Header: norm, Data: e.Data}
			continue
		}
		byName[norm.Name] = len(out)
		out = append(out, Entry{Header: norm, Data: e.Data})
	}
	slices.SortFunc(out, func(a, b Entry) int { return compareNames(a.Header.Name, b.Header.Name) })
	if err := leadHardLinks(out); err != nil {
		return nil, err
	}
	return out, nil
}

// leadHardLinks rewrites each hard-link group (a file and the links to it)
// so that the group's first entry in layer order holds the content and
// the others link to it.
func leadHardLinks(entries []Entry) error {
	index := map[string]int{}
	for i, e := range entries {
		index[e.Header.Name] = i
	}
	groups := map[string][]int{} // target name -> link entries
	for i, e := range entries {
		if e.Header.Typeflag == tar.TypeLink {
			t, ok := index[e.Header.Linkname]
			if !ok || entries[t].Header.Typeflag != tar.TypeReg {
				return fmt.Errorf("%s: hard link to %s, which is not a regular file of the layer", e.Header.Name, e.Header.Linkname)
			}
			groups[e.Header.Linkname] = append(groups[e.Header.Linkname], i)
		}
	}
	for target, links := range groups {
		t := index[target]
		first := slices.Min(links)
		if first > t {
			continue
		}
		// The first link becomes the file; the old file and the other
		// links point at it.
		file := entries[t]
		leader := entries[first].Header.Name
		file.Header.Name = leader
		entries[first] = file
		entries[t] = Entry{Header: linkHeader(entries[t].Header, target, leader)}
		for _, l := range links {
			if l != first {
				entries[l].Header.Linkname = leader
			}
		}
	}
	return nil
}

func linkHeader(h tar.Header, name, target string) tar.Header {
	h.Typeflag, h.Name, h.Linkname, h.Size = tar.TypeLink, name, target, 0
	return h
}

// WriteLayer writes normalized entries as an uncompressed layer tar.
func WriteLayer(w io.Writer, entries []Entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := e.Header
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("%s: %w", e.Header.Name, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return fmt.Errorf("%s: %w", e.Header.Name, err)
		}
	}
	return tw.Close()
}

// Gzip compresses a layer tar. compress/gzip writes no name and no time
// into its header, so equal input gives equal output.
func Gzip(w io.Writer, r io.Reader) error {
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	if _, err := io.Copy(zw, r); err != nil {
		return err
	}
	return zw.Close()
}

// CompressedLayer normalizes entries and returns the gzip-compressed layer.
func CompressedLayer(entries []Entry, epoch time.Time) ([]byte, error) {
	_, gz, err := layerBytes(entries, epoch)
	return gz, err
}

func layerBytes(entries []Entry, epoch time.Time) (raw, gz []byte, err error) {
	norm, err := Normalize(entries, epoch)
	if err != nil {
		return nil, nil, err
	}
	var rawBuf, gzBuf bytes.Buffer
	if err := WriteLayer(&rawBuf, norm); err != nil {
		return nil, nil, err
	}
	if err := Gzip(&gzBuf, bytes.NewReader(rawBuf.Bytes())); err != nil {
		return nil, nil, err
	}
	return rawBuf.Bytes(), gzBuf.Bytes(), nil
}
