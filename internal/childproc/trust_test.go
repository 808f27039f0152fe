package childproc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elfObject writes a minimal ELF64 object of the shape the loader reads:
// a PT_INTERP naming its loader (for a program), and a dynamic section with
// DT_NEEDED, DT_RPATH and DT_RUNPATH entries (their strings in .dynstr),
// as the ELF specification (gABI) and glibc's elf.h lay them out.
func elfObject(interp string, needed []string, rpath, runpath string) []byte {
	le := binary.LittleEndian
	var dynstr bytes.Buffer
	dynstr.WriteByte(0)
	str := func(s string) uint64 {
		off := uint64(dynstr.Len())
		dynstr.WriteString(s)
		dynstr.WriteByte(0)
		return off
	}
	var dyn bytes.Buffer
	entry := func(tag elf.DynTag, val uint64) {
		_ = binary.Write(&dyn, le, int64(tag))
		_ = binary.Write(&dyn, le, val)
	}
	for _, n := range needed {
		entry(elf.DT_NEEDED, str(n))
	}
	if rpath != "" {
		entry(elf.DT_RPATH, str(rpath))
	}
	if runpath != "" {
		entry(elf.DT_RUNPATH, str(runpath))
	}
	entry(elf.DT_NULL, 0)
	shstr := []byte("\x00.interp\x00.dynstr\x00.dynamic\x00.shstrtab\x00")
	interpB := []byte(interp + "\x00")

	const ehsize, phsize, shsize = 64, 56, 64
	nph := 1
	if interp != "" {
		nph = 2
	}
	off := uint64(ehsize + nph*phsize)
	interpOff := off
	off += uint64(len(interpB))
	dynstrOff := off
	off += uint64(dynstr.Len())
	off = (off + 7) &^ 7
	dynOff := off
	off += uint64(dyn.Len())
	shstrOff := off
	off += uint64(len(shstr))
	off = (off + 7) &^ 7
	shOff := off

	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), 0})
	b.Write(make([]byte, 8))
	typ := elf.ET_DYN
	_ = binary.Write(&b, le, uint16(typ))
	_ = binary.Write(&b, le, uint16(elf.EM_X86_64))
	_ = binary.Write(&b, le, uint32(elf.EV_CURRENT))
	_ = binary.Write(&b, le, uint64(0))      // entry
	_ = binary.Write(&b, le, uint64(ehsize)) // phoff
	_ = binary.Write(&b, le, shOff)          // shoff
	_ = binary.Write(&b, le, uint32(0))      // flags
	_ = binary.Write(&b, le, uint16(ehsize)) // ehsize
	_ = binary.Write(&b, le, uint16(phsize)) // phentsize
	_ = binary.Write(&b, le, uint16(nph))    // phnum
	_ = binary.Write(&b, le, uint16(shsize)) // shentsize
	_ = binary.Write(&b, le, uint16(5))      // shnum
	_ = binary.Write(&b, le, uint16(4))      // shstrndx
	prog := func(typ elf.ProgType, o, size uint64) {
		_ = binary.Write(&b, le, uint32(typ))
		_ = binary.Write(&b, le, uint32(elf.PF_R))
		for _, v := range []uint64{o, o, o, size, size, 8} {
			_ = binary.Write(&b, le, v)
		}
	}
	if interp != "" {
		prog(elf.PT_INTERP, interpOff, uint64(len(interpB)))
	}
	prog(elf.PT_DYNAMIC, dynOff, uint64(dyn.Len()))
	b.Write(interpB)
	b.Write(dynstr.Bytes())
	b.Write(make([]byte, int(dynOff)-b.Len()))
	b.Write(dyn.Bytes())
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	sect := func(name uint32, typ elf.SectionType, o, size uint64, link uint32, entsize uint64) {
		_ = binary.Write(&b, le, name)
		_ = binary.Write(&b, le, uint32(typ))
		for _, v := range []uint64{uint64(elf.SHF_ALLOC), o, o, size} {
			_ = binary.Write(&b, le, v)
		}
		_ = binary.Write(&b, le, link)
		_ = binary.Write(&b, le, uint32(0))
		_ = binary.Write(&b, le, uint64(8))
		_ = binary.Write(&b, le, entsize)
	}
	b.Write(make([]byte, shsize)) // the null section
	sect(1, elf.SHT_PROGBITS, interpOff, uint64(len(interpB)), 0, 0)
	sect(9, elf.SHT_STRTAB, dynstrOff, uint64(dynstr.Len()), 0, 0)
	sect(17, elf.SHT_DYNAMIC, dynOff, uint64(dyn.Len()), 2, 16)
	sect(26, elf.SHT_STRTAB, shstrOff, uint64(len(shstr)), 0, 0)
	return b.Bytes()
}

// ldCacheFile writes an ld.so.cache in glibc's format 1.1 (dl-cache.h),
// mapping each name to its path (x86-64 libc6 entries, flags 0x0303).
func ldCacheFile(entries [][2]string) []byte {
	le := binary.NativeEndian
	strOff := uint32(ldCacheHeader + len(entries)*ldCacheEntry)
	var strs bytes.Buffer
	var ents bytes.Buffer
	for _, e := range entries {
		k := strOff + uint32(strs.Len())
		strs.WriteString(e[0] + "\x00")
		v := strOff + uint32(strs.Len())
		strs.WriteString(e[1] + "\x00")
		_ = binary.Write(&ents, le, int32(0x0303))
		_ = binary.Write(&ents, le, k)
		_ = binary.Write(&ents, le, v)
		_ = binary.Write(&ents, le, uint32(0))
		_ = binary.Write(&ents, le, uint64(0))
	}
	var b bytes.Buffer
	b.WriteString(ldCacheMagic)
	_ = binary.Write(&b, le, uint32(len(entries)))
	_ = binary.Write(&b, le, uint32(strs.Len()))
	b.Write(make([]byte, 4+4+12)) // flags, padding, extension offset, unused
	b.Write(ents.Bytes())
	b.Write(strs.Bytes())
	return b.Bytes()
}

// fakeHost is a host root with a dynamically linked tool that passes:
// root-owned files in root-owned 0755 directories, the loader in /lib64,
// libc in the multiarch directory, /tmp and /var/tmp world-writable as on
// a real host.
type fakeHost struct {
	t    *testing.T
	root string
}

const loader = "/lib64/ld-linux-x86-64.so.2"

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the trust tests plant files of other users: run them as root")
	}
	h := &fakeHost{t: t, root: t.TempDir()}
	if err := os.Chmod(h.root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/lib/x86_64-linux-gnu", "/lib64", "/etc", "/opt"} {
		h.mkdir(d, 0o755)
	}
	for _, d := range []string{"/tmp", "/var/tmp"} {
		h.mkdir(d, 0o1777)
	}
	h.write(loader, elfObject("", nil, "", ""), 0o755)
	h.write("/usr/lib/x86_64-linux-gnu/libc.so.6", elfObject("", []string{"ld-linux-x86-64.so.2"}, "", ""), 0o755)
	h.write("/usr/bin/tool", h.program([]string{"libc.so.6"}, "", ""), 0o755)
	h.write("/usr/bin/env", h.program([]string{"libc.so.6"}, "", ""), 0o755)
	h.write("/usr/bin/python3", h.program([]string{"libc.so.6"}, "", ""), 0o755)
	return h
}

func (h *fakeHost) program(needed []string, rpath, runpath string) []byte {
	return elfObject(loader, needed, rpath, runpath)
}

func (h *fakeHost) path(p string) string { return filepath.Join(h.root, p) }

func (h *fakeHost) mkdir(p string, mode os.FileMode) {
	h.t.Helper()
	if err := os.MkdirAll(h.path(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(h.path(p), mode); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) write(p string, b []byte, mode os.FileMode) {
	h.t.Helper()
	if err := os.WriteFile(h.path(p), b, mode); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(h.path(p), mode); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) chown(p string, uid int) {
	h.t.Helper()
	if err := os.Lchown(h.path(p), uid, uid); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) symlink(target, p string) {
	h.t.Helper()
	if err := os.Symlink(target, h.path(p)); err != nil {
		h.t.Fatal(err)
	}
}

// TestTrustedToolRuns: the tool of a healthy host and what it loads pass,
// also reached through links inside the root, a script whose interpreter
// is trusted, and "#!/usr/bin/env python3".
func TestTrustedToolRuns(t *testing.T) {
	h := newFakeHost(t)
	h.write("/usr/bin/script", []byte("#!/usr/bin/python3 -u\nprint(1)\n"), 0o755)
	h.write("/usr/bin/envscript", []byte("#!/usr/bin/env -S python3 -u\nprint(1)\n"), 0o755)
	h.mkdir("/opt/vendor/bin", 0o755)
	h.mkdir("/opt/vendor/lib", 0o755)
	h.write("/opt/vendor/lib/libvendor.so.1", elfObject("", []string{"libc.so.6"}, "", ""), 0o644)
	h.write("/opt/vendor/bin/vtool", h.program([]string{"libvendor.so.1", "libc.so.6"}, "", "$ORIGIN/../lib"), 0o755)
	h.symlink("/opt/vendor/bin/vtool", "/usr/bin/vtool")
	h.symlink("../../../../../../usr/bin/tool", "/usr/local/bin/escaper") // ".." stops at the root
	for _, p := range []string{"/usr/bin/tool", "/usr/bin/script", "/usr/bin/envscript", "/usr/bin/vtool", "/usr/local/bin/escaper"} {
		if err := CheckTrust(h.root, p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if p, err := LookPathInRoot(h.root, "vtool"); err != nil || p != "/opt/vendor/bin/vtool" {
		t.Errorf("LookPathInRoot(vtool) = %q, %v", p, err)
	}
}

// TestHostileLayoutsAreRefused plants, one at a time, each way an
// unprivileged user of the host could get code of theirs run as root by
// the agent: the run is refused, naming the file at fault.
func TestHostileLayoutsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(h *fakeHost)
		prog  string
		blame string // in the error
	}{
		{"a tool owned by a user", func(h *fakeHost) { h.chown("/usr/bin/tool", 1000) }, "/usr/bin/tool", "/usr/bin/tool in"},
		{"a tool others may write", func(h *fakeHost) { h.write("/usr/bin/tool", h.program([]string{"libc.so.6"}, "", ""), 0o757) }, "/usr/bin/tool", "writable by group or others"},
		{"a tool in world-writable /var/tmp", func(h *fakeHost) {
			h.write("/var/tmp/tool", h.program(nil, "", ""), 0o755)
		}, "/var/tmp/tool", "/var/tmp (on the way to /var/tmp/tool)"},
		{"a link into world-writable /var/tmp", func(h *fakeHost) {
			h.write("/var/tmp/tool", h.program(nil, "", ""), 0o755)
			h.symlink("/var/tmp/tool", "/usr/local/bin/nvidia-smi")
		}, "/usr/local/bin/nvidia-smi", "/var/tmp"},
		{"a link escaping the root lands in the root's own /tmp", func(h *fakeHost) {
			h.write("/tmp/nvidia-smi", h.program(nil, "", ""), 0o755)
			h.symlink("../../../../../../../../tmp/nvidia-smi", "/usr/bin/nvidia-smi")
		}, "/usr/bin/nvidia-smi", "/tmp (on the way to"},
		{"a script with an interpreter owned by uid 1000", func(h *fakeHost) {
			h.mkdir("/opt/py/bin", 0o755)
			h.write("/opt/py/bin/python3", h.program([]string{"libc.so.6"}, "", ""), 0o755)
			h.chown("/opt/py/bin/python3", 1000)
			h.write("/usr/bin/amd-smi", []byte("#!/opt/py/bin/python3\nimport amdsmi\n"), 0o755)
		}, "/usr/bin/amd-smi", "/opt/py/bin/python3 in"},
		{"a script with an interpreter in a directory of uid 1000", func(h *fakeHost) {
			h.mkdir("/opt/py/bin", 0o755)
			h.chown("/opt/py", 1000)
			h.write("/opt/py/bin/python3", h.program([]string{"libc.so.6"}, "", ""), 0o755)
			h.write("/usr/bin/amd-smi", []byte("#!/opt/py/bin/python3\n"), 0o755)
		}, "/usr/bin/amd-smi", "/opt/py (on the way to /opt/py/bin/python3)"},
		{"an interpreter's interpreter", func(h *fakeHost) {
			h.write("/var/tmp/sh", h.program(nil, "", ""), 0o755)
			h.write("/usr/bin/wrapper", []byte("#!/var/tmp/sh\n"), 0o755)
			h.write("/usr/bin/amd-smi", []byte("#!/usr/bin/wrapper\n"), 0o755)
		}, "/usr/bin/amd-smi", "/var/tmp"},
		{"env finds python3 in a writable place", func(h *fakeHost) {
			h.write("/usr/local/bin/python3", h.program([]string{"libc.so.6"}, "", ""), 0o777)
			h.write("/usr/bin/amd-smi", []byte("#!/usr/bin/env python3\n"), 0o755)
		}, "/usr/bin/amd-smi", "/usr/local/bin/python3"},
		{"env searches a writable PATH directory first", func(h *fakeHost) {
			h.mkdir("/usr/local/sbin", 0o777)
			h.write("/usr/bin/amd-smi", []byte("#!/usr/bin/env python3\n"), 0o755)
		}, "/usr/bin/amd-smi", "/usr/local/sbin"},
		{"too many interpreters", func(h *fakeHost) {
			prev := "/usr/bin/python3"
			for i := range 5 {
				p := "/usr/bin/s" + string(rune('0'+i))
				h.write(p, []byte("#!"+prev+"\n"), 0o755)
				prev = p
			}
		}, "/usr/bin/s4", "interpreter"},
		{"a loader owned by a user", func(h *fakeHost) { h.chown(loader, 1000) }, "/usr/bin/tool", "/lib64/ld-linux-x86-64.so.2 in"},
		{"a library owned by a user", func(h *fakeHost) {
			h.chown("/usr/lib/x86_64-linux-gnu/libc.so.6", 1000)
		}, "/usr/bin/tool", "libc.so.6 in"},
		{"a library of a library", func(h *fakeHost) {
			h.write("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", elfObject("", []string{"libevil.so"}, "", ""), 0o644)
			h.write("/usr/lib/x86_64-linux-gnu/libevil.so", elfObject("", nil, "", ""), 0o666)
			h.write("/usr/bin/tool", h.program([]string{"libnvidia-ml.so.1", "libc.so.6"}, "", ""), 0o755)
		}, "/usr/bin/tool", "libevil.so"},
		{"a writable library directory searched first (DT_RUNPATH)", func(h *fakeHost) {
			h.mkdir("/opt/lib", 0o777)
			h.write("/usr/bin/tool", h.program([]string{"libc.so.6"}, "", "/opt/lib"), 0o755)
		}, "/usr/bin/tool", "/opt/lib"},
		{"a writable library directory searched first (DT_RPATH)", func(h *fakeHost) {
			h.mkdir("/opt/lib", 0o775)
			h.write("/usr/bin/tool", h.program([]string{"libc.so.6"}, "/opt/lib", ""), 0o755)
		}, "/usr/bin/tool", "/opt/lib"},
		{"$ORIGIN to a group-writable directory", func(h *fakeHost) {
			h.mkdir("/opt/vendor/bin", 0o755)
			h.mkdir("/opt/vendor/lib", 0o775)
			h.write("/opt/vendor/bin/vtool", h.program([]string{"libc.so.6"}, "", "$ORIGIN/../lib"), 0o755)
		}, "/opt/vendor/bin/vtool", "/opt/vendor/lib"},
		{"the loader's cache points into a writable directory", func(h *fakeHost) {
			h.mkdir("/opt/gpu", 0o777)
			h.write("/opt/gpu/libnvidia-ml.so.1", elfObject("", nil, "", ""), 0o644)
			h.write("/etc/ld.so.cache", ldCacheFile([][2]string{{"libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, {"libnvidia-ml.so.1", "/opt/gpu/libnvidia-ml.so.1"}}), 0o644)
			h.write("/usr/bin/tool", h.program([]string{"libnvidia-ml.so.1", "libc.so.6"}, "", ""), 0o755)
		}, "/usr/bin/tool", "/opt/gpu"},
		{"a loader's cache others may write", func(h *fakeHost) {
			h.write("/etc/ld.so.cache", ldCacheFile([][2]string{{"libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"}}), 0o666)
		}, "/usr/bin/tool", "/etc/ld.so.cache"},
		{"a preloaded library of a user", func(h *fakeHost) {
			h.write("/opt/hook.so", elfObject("", nil, "", ""), 0o644)
			h.chown("/opt/hook.so", 1000)
			h.write("/etc/ld.so.preload", []byte("/opt/hook.so\n"), 0o644)
		}, "/usr/bin/tool", "/opt/hook.so"},
		{"a symbolic link loop", func(h *fakeHost) {
			h.symlink("/usr/bin/b", "/usr/bin/a")
			h.symlink("/usr/bin/a", "/usr/bin/b")
		}, "/usr/bin/a", "too many levels of symbolic links"},
		{"a root directory others may write", func(h *fakeHost) { h.mkdir("/", 0o777) }, "/usr/bin/tool", "/ in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			tc.plant(h)
			err := CheckTrust(h.root, tc.prog)
			if !errors.Is(err, ErrUntrusted) {
				t.Fatalf("CheckTrust(%s) = %v, want a refusal", tc.prog, err)
			}
			if !strings.Contains(err.Error(), tc.blame) {
				t.Errorf("the refusal does not name %q: %v", tc.blame, err)
			}
			// LookPathInRoot does not hand it out either.
			if p, err := LookPathInRoot(h.root, tc.prog); err == nil {
				t.Errorf("LookPathInRoot(%s) = %s", tc.prog, p)
			}
		})
	}
}

// TestThisHostsToolsPass runs the check on real programs of this machine:
// ELF files with RUNPATH, the real ld.so.cache, a shell script.
func TestThisHostsToolsPass(t *testing.T) {
	for _, p := range []string{"/usr/bin/journalctl", "/usr/bin/zcat", "/usr/bin/env"} {
		if err := CheckTrust("/", p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if p, err := LookPathInRoot("/", "journalctl"); err != nil || !strings.HasSuffix(p, "/journalctl") {
		t.Errorf("LookPathInRoot(/, journalctl) = %q, %v", p, err)
	}
}

func TestParseLDCache(t *testing.T) {
	c, err := parseLDCache(ldCacheFile([][2]string{{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"}, {"libc.so.6", "/lib/i386-linux-gnu/libc.so.6"}, {"libm.so.6", "/lib/libm.so.6"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.lookup("libc.so.6"); len(got) != 2 || got[1] != "/lib/i386-linux-gnu/libc.so.6" {
		t.Errorf("libc.so.6: %v", got)
	}
	real, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	c, err = parseLDCache(real)
	if err != nil {
		t.Fatalf("this machine's cache: %v", err)
	}
	if len(c.lookup("libc.so.6")) == 0 {
		t.Error("this machine's cache has no libc.so.6")
	}
	for _, bad := range [][]byte{nil, []byte(ldCacheMagic), []byte("ld.so-1.7.0"), append([]byte(ldCacheMagic), make([]byte, 28)...)} {
		if _, err := parseLDCache(bad); err == nil && len(bad) != ldCacheHeader {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseLDCache(f *testing.F) {
	f.Add(ldCacheFile([][2]string{{"libc.so.6", "/lib/libc.so.6"}}))
	f.Add(append([]byte("ld.so-1.7.0\x00\x01\x00\x00\x00"), ldCacheFile(nil)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseLDCache(b)
		if err == nil && c == nil {
			t.Fatal("nil cache without an error")
		}
	})
}

// A log file a rule believes is trusted as a tool is: root's alone, and so
// is every directory on the way; a link is followed inside the root.
func TestCheckFileTrust(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("var/log/site/check.log", 0o644)
	mk("var/log/site/open.log", 0o666)
	mk("var/tmp/x/site.log", 0o644)
	if err := os.Chmod(filepath.Join(root, "var/tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/log/site/check.log", filepath.Join(root, "var/log/site/link.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/tmp/x/site.log", filepath.Join(root, "var/log/site/bad-link.log")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string // "" trusted; else a substring of the error
	}{
		{"/var/log/site/check.log", ""},
		{"/var/log/site/link.log", ""},
		{"/var/log/site/open.log", "writable by group or others"},
		{"/var/tmp/x/site.log", "/var/tmp (on the way to /var/tmp/x/site.log)"},
		{"/var/log/site/bad-link.log", "/var/tmp"},
		{"/var/log/site", "not a regular file"},
	} {
		real, err := CheckFileTrust(root, tc.path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.path, err)
		case tc.want == "" && real != "/var/log/site/check.log":
			t.Errorf("%s resolved to %s", tc.path, real)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.path, err, tc.want)
		}
	}
}
