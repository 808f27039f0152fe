package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Tree is a read-only view of layer entries as a file system, following
// symbolic links the way the kernel would inside the container.
type Tree map[string]Entry

// NewTree indexes entries by name; later entries replace earlier ones, as
// upper layers do.
func NewTree(layers ...[]Entry) Tree {
	t := Tree{}
	for _, entries := range layers {
		for _, e := range entries {
			t[e.Header.Name] = e
		}
	}
	return t
}

// Resolve follows symbolic links in every component of p (absolute, in the
// image) and returns the entry it names.
func (t Tree) Resolve(p string) (Entry, bool) {
	name, ok := t.resolve(CleanName(p), 0)
	if !ok {
		return Entry{}, false
	}
	e, ok := t[name]
	if ok && e.Header.Typeflag == tar.TypeLink {
		e, ok = t[e.Header.Linkname]
	}
	return e, ok
}

func (t Tree) resolve(name string, hops int) (string, bool) {
	if hops > 40 {
		return "", false
	}
	parts := strings.Split(name, "/")
	cur := ""
	for i, part := range parts {
		next := path.Join(cur, part)
		e, ok := t[next]
		if !ok {
			return "", false
		}
		if e.Header.Typeflag == tar.TypeSymlink {
			target := e.Header.Linkname
			if !path.IsAbs(target) {
				target = path.Join("/", cur, target)
			}
			rest := append([]string{CleanName(target)}, parts[i+1:]...)
			return t.resolve(CleanName(path.Join(rest...)), hops+1)
		}
		cur = next
	}
	return cur, true
}

// multiarch is the Debian multiarch directory of an ELF machine.
var multiarch = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64-linux-gnu",
	elf.EM_AARCH64: "aarch64-linux-gnu",
}

// CheckDynamicLinks reports why binary could not start in the tree: its
// program interpreter missing, a shared library it needs missing, or a
// symbol version (GLIBC_2.34, …) it needs that the library in the tree
// does not define — what happens when a cgo binary is built against a
// newer glibc than the image's. A static binary passes.
func CheckDynamicLinks(binary []byte, t Tree) error {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("reading the program interpreter: %w", err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil
	}
	if _, ok := t.Resolve(interp); !ok {
		return fmt.Errorf("program interpreter %s is not in the image", interp)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return err
	}
	dirs := []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64"}
	if ma, ok := multiarch[f.Machine]; ok {
		dirs = append([]string{"/lib/" + ma, "/usr/lib/" + ma}, dirs...)
	}
	var problems []string
	for _, lib := range libs {
		var found Entry
		ok := false
		for _, d := range dirs {
			if found, ok = t.Resolve(path.Join(d, lib)); ok {
				break
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s not found in %s", lib, strings.Join(dirs, ", ")))
			continue
		}
		var want []string
		for _, n := range needs {
			if n.Name == lib {
				for _, d := range n.Needs {
					want = append(want, d.Dep)
				}
			}
		}
		if len(want) == 0 {
			continue
		}
		lf, err := elf.NewFile(bytes.NewReader(found.Data))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", lib, err))
			continue
		}
		defs, err := lf.DynamicVersions()
		lf.Close()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", lib, err))
			continue
		}
		for _, w := range want {
			if !slices.ContainsFunc(defs, func(d elf.DynamicVersion) bool { return d.Name == w }) {
				problems = append(problems, fmt.Sprintf("%s in the image does not define %s", lib, w))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the binary cannot start in this image: %s", strings.Join(problems, "; "))
	}
	return nil
}
