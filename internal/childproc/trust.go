package childproc

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Limits of CheckTrust, as the kernel and the dynamic loader have theirs.
const (
	// maxInterpreters bounds a chain of "#!" scripts (the kernel stops at
	// a few levels too: BINPRM_MAX_RECURSION).
	maxInterpreters = 4
	// maxSymlinks is the kernel's limit on links followed in one lookup
	// (MAXSYMLINKS).
	maxSymlinks = 40
	// maxObjects bounds the ELF objects of one program (itself, its loader
	// and its libraries).
	maxObjects = 256
	// shebangBytes is what the kernel reads of a script's first line
	// (BINPRM_BUF_SIZE).
	shebangBytes = 256
)

// CheckTrust reports whether running the program at prog — a path inside
// root, where the program runs chrooted ("/" for the agent's own
// filesystem) — as root can only run code that root alone can change. Each
// of these must be a file owned by root (or by the agent's own user) that
// neither its group nor others may write, and so must every directory on
// the way to it, symbolic links resolved inside root as the kernel does
// after the chroot (a link cannot lead out: ".." stops at root):
//
//   - the program;
//   - its "#!" interpreter, that one's own, and so on (at most
//     maxInterpreters), and for "#!/usr/bin/env NAME" the NAME that env
//     finds in ToolDirs;
//   - of every ELF program among them, its dynamic loader (PT_INTERP) and
//     the shared libraries it loads (DT_NEEDED, recursively), found the way
//     the loader finds them (ld.so(8)): a name with a slash as is; else in
//     DT_RPATH (when there is no DT_RUNPATH), DT_RUNPATH, the host's
//     /etc/ld.so.cache, then the default directories — and every directory
//     searched before the one a library is found in, where anyone who could
//     write would plant their own; plus /etc/ld.so.cache and
//     /etc/ld.so.preload with what it lists.
//
// The programs run with an environment of the agent's (no
// LD_LIBRARY_PATH, LD_PRELOAD, PYTHONPATH). Files are parsed with
// debug/elf and read as data, never run (ldd would run the untrusted
// loader). A library found nowhere is not an error: the program fails to
// start on its own, and nobody but root could have planted it in a
// directory searched. The error wraps ErrUntrusted, naming the file and why.
func CheckTrust(root, prog string) error {
	w := &trustWalk{root: filepath.Clean(root), seen: map[string]bool{}}
	if err := w.dirTrusted("/"); err != nil {
		return err
	}
	return w.program(prog, 0)
}

// CheckFileTrust checks that only root could have written the file at p
// (absolute, on the host whose filesystem is at root) and every directory
// on the way to it, symbolic links resolved inside root as for CheckTrust:
// lines an operator's rule believes from a file are as trustworthy as
// that. It returns the file's resolved path inside root. The error wraps
// ErrUntrusted (or fs.ErrNotExist: a file not there yet, in a directory
// only root can write).
func CheckFileTrust(root, p string) (string, error) {
	w := &trustWalk{root: filepath.Clean(root), seen: map[string]bool{}}
	if err := w.dirTrusted("/"); err != nil {
		return "", err
	}
	real, err := w.resolve(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(filepath.Join(w.root, real))
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", w.refuse(p, "is not a regular file")
	}
	return real, nil
}

// trustWalk is one CheckTrust.
type trustWalk struct {
	root string
	// seen are the ELF objects already walked (resolved paths in root).
	seen  map[string]bool
	cache *ldCache // /etc/ld.so.cache, read on first use
	// preloaded: /etc/ld.so.preload was checked.
	preloaded bool
}

func (w *trustWalk) refuse(what, why string) error {
	return fmt.Errorf("%w: %s in %s %s", ErrUntrusted, what, w.root, why)
}

// program checks the program at p, depth interpreters deep.
func (w *trustWalk) program(p string, depth int) error {
	if depth > maxInterpreters {
		return w.refuse(p, fmt.Sprintf("is the %d-th interpreter of a chain of scripts (at most %d)", depth, maxInterpreters))
	}
	real, err := w.resolve(p)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(w.root, real))
	if err != nil {
		return err
	}
	head := make([]byte, shebangBytes)
	n, _ := io.ReadFull(f, head)
	f.Close()
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		interp, arg, err := shebang(head)
		if err != nil {
			return w.refuse(p, err.Error())
		}
		if !path.IsAbs(interp) {
			interp = "/" + interp // relative to the working directory, "/"
		}
		if err := w.program(interp, depth+1); err != nil {
			return fmt.Errorf("%s's interpreter: %w", p, err)
		}
		if path.Base(interp) == "env" {
			if err := w.envTarget(p, arg, depth+1); err != nil {
				return err
			}
		}
		return nil
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		return w.elfProgram(real)
	}
	// Neither: the kernel refuses to run it (ENOEXEC); nothing it loads.
	return nil
}

// envTarget checks what "#!/usr/bin/env ARG" runs: the first word of ARG
// that is not an option, found in ToolDirs (the PATH the tools run with).
func (w *trustWalk) envTarget(script, arg string, depth int) error {
	var name string
	for _, word := range strings.Fields(arg) {
		if !strings.HasPrefix(word, "-") && !strings.Contains(word, "=") {
			name = word
			break
		}
	}
	if name == "" {
		return w.refuse(script, fmt.Sprintf("runs %q through env, which names no program", arg))
	}
	if strings.Contains(name, "/") {
		return w.program(path.Join("/", name), depth)
	}
	for _, d := range ToolDirs {
		c := d + "/" + name
		if _, err := w.resolve(d); err != nil {
			// A directory of the PATH someone else can write is where
			// they would put their NAME first.
			if errors.Is(err, ErrUntrusted) {
				return err
			}
			continue
		}
		real, err := w.resolve(c)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s's interpreter (env %s): %w", script, name, err)
		}
		fi, err := os.Stat(filepath.Join(w.root, real))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if err := w.program(c, depth); err != nil {
			return fmt.Errorf("%s's interpreter (env %s): %w", script, name, err)
		}
		return nil
	}
	return nil // env finds nothing: the script does not start
}

// shebang parses a "#!" line as the kernel does (fs/binfmt_script.c): the
// interpreter is the first word after "#!", the rest of the line one
// argument.
func shebang(head []byte) (interp, arg string, err error) {
	line := head[2:]
	nl := bytes.IndexByte(line, '\n')
	if nl < 0 {
		if len(head) == shebangBytes {
			return "", "", errors.New("has a \"#!\" line longer than the kernel reads")
		}
		nl = len(line)
	}
	line = bytes.Trim(line[:nl], " \t")
	i := bytes.IndexAny(line, " \t")
	if i < 0 {
		i = len(line)
	}
	if i == 0 {
		return "", "", errors.New("has a \"#!\" line without an interpreter")
	}
	return string(line[:i]), string(bytes.TrimLeft(line[i:], " \t")), nil
}

// elfProgram checks an ELF program's loader and libraries.
func (w *trustWalk) elfProgram(real string) error {
	f, err := w.openELF(real)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return w.refuse(real, fmt.Sprintf("has an unreadable PT_INTERP: %v", err))
		}
		loader := string(bytes.TrimRight(b, "\x00"))
		if err := w.library(loader, nil); err != nil {
			return fmt.Errorf("%s's loader: %w", real, err)
		}
		// A dynamically linked program: the loader's own files too.
		if err := w.preload(); err != nil {
			return err
		}
	}
	return w.needed(real, f, nil)
}

// openELF opens an ELF file for reading its headers; debug/elf is fed
// files root owns (they were checked first), and a panic on a malformed one
// is a refusal.
func (w *trustWalk) openELF(real string) (f *elf.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, w.refuse(real, fmt.Sprintf("is a malformed ELF file (%v)", r))
		}
	}()
	f, err = elf.Open(filepath.Join(w.root, real))
	if err != nil {
		return nil, w.refuse(real, fmt.Sprintf("is not a readable ELF file: %v", err))
	}
	return f, nil
}

// library checks one library (or loader) file at p and walks its
// libraries (see libraryAt).
func (w *trustWalk) library(p string, exeRPath []string) error {
	real, err := w.resolve(p)
	if err != nil {
		return err
	}
	return w.libraryAt(p, real, exeRPath)
}

// needed checks the libraries obj (at real) needs. exeRPath is the
// executable's DT_RPATH, which the loader also searches for the libraries
// of objects without a DT_RUNPATH.
func (w *trustWalk) needed(real string, f *elf.File, exeRPath []string) error {
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) == 0 {
		return nil // static, or no dynamic section
	}
	origin := path.Dir(real)
	rpath, _ := f.DynString(elf.DT_RPATH)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	var dirs []string
	if len(runpath) == 0 {
		dirs = append(splitPath(rpath, origin), exeRPath...)
	}
	dirs = append(dirs, splitPath(runpath, origin)...)
	childRPath := exeRPath
	if exeRPath == nil {
		childRPath = splitPath(rpath, origin)
	}
	for _, name := range libs {
		if err := w.findLibrary(real, name, dirs, childRPath); err != nil {
			return err
		}
	}
	return nil
}

// splitPath splits DT_RPATH or DT_RUNPATH values into directories, with
// $ORIGIN replaced by origin and $LIB by both its values.
func splitPath(values []string, origin string) []string {
	var out []string
	for _, v := range values {
		for _, d := range strings.Split(v, ":") {
			if d == "" {
				d = "." // an empty entry is the working directory
			}
			d = strings.NewReplacer("${ORIGIN}", origin, "$ORIGIN", origin).Replace(d)
			if strings.Contains(d, "$LIB") || strings.Contains(d, "${LIB}") {
				for _, lib := range []string{"lib64", "lib"} {
					out = append(out, strings.NewReplacer("${LIB}", lib, "$LIB", lib).Replace(d))
				}
				continue
			}
			out = append(out, d)
		}
	}
	return out
}

// defaultLibDirs are the loader's own directories, after the cache: the
// multiarch ones of Debian and Ubuntu, then the 64-bit and plain ones.
var defaultLibDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// findLibrary finds name for the object at obj and checks it, and every
// directory searched before it.
func (w *trustWalk) findLibrary(obj, name string, dirs, exeRPath []string) error {
	if strings.Contains(name, "/") {
		return w.library(path.Join("/", name), exeRPath)
	}
	try := func(dir string) (bool, error) {
		if strings.Contains(dir, "$") {
			return false, w.refuse(obj, fmt.Sprintf("searches %q for its libraries, a path the agent cannot resolve", dir))
		}
		dir = path.Join("/", dir)
		if err := w.dirTrusted(dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil // and only root could create it
			}
			return false, fmt.Errorf("%s searches %s for %s: %w", obj, dir, name, err)
		}
		real, err := w.resolve(path.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, w.libraryAt(obj, real, exeRPath)
	}
	for _, d := range dirs {
		if found, err := try(d); found || err != nil {
			return err
		}
	}
	cache, err := w.ldCache()
	if err != nil {
		return err
	}
	if paths := cache.lookup(name); len(paths) > 0 {
		// Every entry of the name (any architecture's): more than the
		// loader uses, never less.
		for _, p := range paths {
			if err := w.library(p, exeRPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s needs %s: %w", obj, name, err)
			}
		}
		return nil
	}
	for _, d := range defaultLibDirs {
		if found, err := try(d); found || err != nil {
			return err
		}
	}
	return nil
}

// libraryAt checks the library at real (its file and the way to it are
// checked already: resolve) and walks its own, with the executable's
// DT_RPATH. obj names what needs it, for messages.
func (w *trustWalk) libraryAt(obj, real string, exeRPath []string) error {
	if w.seen[real] {
		return nil
	}
	if len(w.seen) >= maxObjects {
		return w.refuse(real, fmt.Sprintf("is one more than the %d ELF objects a program may load here", maxObjects))
	}
	w.seen[real] = true
	f, err := w.openELF(real)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := w.needed(real, f, exeRPath); err != nil {
		return fmt.Errorf("%s: %w", obj, err)
	}
	return nil
}

// ldCache reads /etc/ld.so.cache once; a missing one is empty.
func (w *trustWalk) ldCache() (*ldCache, error) {
	if w.cache != nil {
		return w.cache, nil
	}
	w.cache = &ldCache{}
	real, err := w.resolve("/etc/ld.so.cache")
	if errors.Is(err, fs.ErrNotExist) {
		return w.cache, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the loader's cache: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(w.root, real))
	if err != nil {
		return nil, err
	}
	c, err := parseLDCache(b)
	if err != nil {
		return nil, w.refuse("/etc/ld.so.cache", err.Error())
	}
	w.cache = c
	return c, nil
}

// preload checks /etc/ld.so.preload and the libraries it lists, which the
// loader loads into every dynamically linked program.
func (w *trustWalk) preload() error {
	if w.preloaded {
		return nil
	}
	w.preloaded = true
	real, err := w.resolve("/etc/ld.so.preload")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the loader's preload list: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(w.root, real))
	if err != nil {
		return err
	}
	for _, lib := range strings.FieldsFunc(string(b), func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == ':' }) {
		if strings.HasPrefix(lib, "#") {
			continue
		}
		if err := w.library(path.Join("/", lib), nil); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("/etc/ld.so.preload: %w", err)
		}
	}
	return nil
}

// dirTrusted checks that the directory at p (and the way to it) is trusted.
func (w *trustWalk) dirTrusted(p string) error {
	real, err := w.resolve(p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(filepath.Join(w.root, real))
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
	}
	return nil
}

// resolve resolves p inside the root as the kernel does after a chroot
// there, and checks every directory it passes through and what it ends at
// (the final file or directory): each must be trusted. It returns the
// resolved path (inside root). A missing component is an error wrapping
// fs.ErrNotExist — found only after every directory before it was trusted,
// so that nobody else can create it.
func (w *trustWalk) resolve(p string) (string, error) {
	fi, err := os.Stat(w.root) // the root may be reached through a link of the agent's
	if err != nil {
		return "", err
	}
	if why := untrusted(fi); why != "" {
		return "", w.refuse("/", "is "+why)
	}
	todo := strings.Split(p, "/")
	cur, links := "/", 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur) // "/" stays "/"
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(w.root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return "", w.refuse(p, "has too many levels of symbolic links")
			}
			target, err := os.Readlink(filepath.Join(w.root, next))
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if why := untrusted(fi); why != "" {
			what := next
			if next != p {
				what = next + " (on the way to " + p + ")"
			}
			return "", w.refuse(what, "is "+why)
		}
		if len(todo) > 0 && !fi.IsDir() {
			return "", fmt.Errorf("%s: %w", next, syscall.ENOTDIR)
		}
		cur = next
	}
	return cur, nil
}
