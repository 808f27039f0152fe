package imagebuild

import (
	"archive/tar"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostFile makes an entry of a file of this machine at the same path.
func hostFile(t *testing.T, path string) Entry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: CleanName(path), Mode: 0o755, Size: int64(len(data))}, Data: data}
}

// dynamicBinary is a dynamically linked glibc binary of this machine and
// the loader and libraries it needs, found the way ldd would.
func dynamicBinary(t *testing.T) (binary []byte, interp string, libs []string) {
	t.Helper()
	const bin = "/usr/bin/env" // coreutils: needs only libc
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	needed, _ := f.ImportedLibraries()
	ma := multiarch[f.Machine]
	for _, l := range needed {
		libs = append(libs, filepath.Join("/usr/lib", ma, l))
	}
	data, _ := os.ReadFile(bin)
	return data, interp, libs
}

// A glibc binary starts in a tree that has its loader and libraries with
// the symbol versions it needs (through merged-/usr symlinks), and the
// check says which part is missing when one is.
func TestCheckDynamicLinks(t *testing.T) {
	binary, interp, libs := dynamicBinary(t)
	realInterp, err := filepath.EvalSymlinks(interp)
	if err != nil {
		t.Fatal(err)
	}
	tree := func(withLibc bool, libc Entry) Tree {
		var entries []Entry
		// Debian's merged /usr: /lib64 -> usr/lib64, /lib -> usr/lib.
		entries = append(entries,
			Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "lib", Linkname: "usr/lib"}},
			Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "lib64", Linkname: "usr/lib64"}},
			Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr"}},
			Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib"}},
			Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib64"}},
			Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: "usr/lib/" + filepath.Base(filepath.Dir(libs[0]))}},
		)
		ld := hostFile(t, realInterp)
		entries = append(entries, ld)
		if CleanName(interp) != ld.Header.Name {
			entries = append(entries, Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "usr/lib64/" + filepath.Base(interp), Linkname: "/" + ld.Header.Name}})
		}
		if withLibc {
			libc.Header.Name = CleanName(libs[0])
			entries = append(entries, libc)
		}
		return NewTree(entries)
	}
	libc := hostFile(t, libs[0])
	if err := CheckDynamicLinks(binary, tree(true, libc)); err != nil {
		t.Fatalf("a complete tree: %v", err)
	}
	if err := CheckDynamicLinks(binary, tree(false, libc)); err == nil || !strings.Contains(err.Error(), "libc.so.6 not found") {
		t.Errorf("without libc: %v", err)
	}
	// A library in place of libc that defines none of glibc's versions:
	// the error names the version the binary needs.
	other := hostFile(t, realInterp)
	if err := CheckDynamicLinks(binary, tree(true, other)); err == nil || !strings.Contains(err.Error(), "does not define GLIBC_") {
		t.Errorf("with an old libc: %v", err)
	}
	if err := CheckDynamicLinks(binary, NewTree(nil)); err == nil || !strings.Contains(err.Error(), "program interpreter") {
		t.Errorf("empty tree: %v", err)
	}
}
