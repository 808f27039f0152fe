package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeToolName is what this test binary answers to when a test copies it
// into a fake root: it then reports where it runs instead of running tests.
// (The package links no cgo, so its test binary is static and runs inside a
// root without libraries.)
const fakeToolName = "nodemend-fake-tool"

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == fakeToolName {
		wd, _ := os.Getwd()
		_, err := os.Stat("/inside-the-root")
		fmt.Printf("cwd=%s marker=%v args=%s\n", wd, err == nil, strings.Join(os.Args[1:], " "))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeRoot is a root filesystem with this test binary installed as
// /usr/bin/nodemend-fake-tool, /bin a link to usr/bin as on a merged-/usr
// system, and an absolute link /usr/local/bin/linked-tool →
// /usr/bin/nodemend-fake-tool that only resolves inside the root.
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"usr/bin", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, self, filepath.Join(root, "usr/bin", fakeToolName))
	must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(t, os.Symlink("/usr/bin/"+fakeToolName, filepath.Join(root, "usr/local/bin/linked-tool")))
	must(t, os.WriteFile(filepath.Join(root, "inside-the-root"), nil, 0o644))
	return root
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	must(t, out.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLookPathInRoot(t *testing.T) {
	root := fakeRoot(t)
	e := Exec{Root: root}
	for name, want := range map[string]string{
		fakeToolName:                     "/usr/bin/" + fakeToolName, // after /usr/local/bin and /usr/sbin, which lack it
		"linked-tool":                    "/usr/bin/" + fakeToolName, // the absolute link, resolved inside the root
		"/bin/" + fakeToolName:           "/usr/bin/" + fakeToolName,
		"/usr/bin/" + fakeToolName:       "/usr/bin/" + fakeToolName,
		"/../../usr/bin/" + fakeToolName: "/usr/bin/" + fakeToolName, // ".." stops at the root
	} {
		got, err := e.LookPath(name)
		if err != nil || got != want {
			t.Errorf("LookPath(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"dcgmi", "usr/bin/" + fakeToolName, "", "/usr/bin"} {
		if got, err := e.LookPath(name); err == nil {
			t.Errorf("LookPath(%q) = %q, want an error", name, got)
		}
	}
	if _, err := e.LookPath("dcgmi"); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), root) {
		t.Errorf("missing tool: %v", err)
	}
	// A link that points out of the root is resolved inside it: the
	// agent's own copy of the tool is not run as the host's.
	self, _ := os.Executable()
	must(t, os.Symlink(self, filepath.Join(root, "usr/local/bin/escaping-tool")))
	if got, err := e.LookPath("escaping-tool"); err == nil {
		t.Errorf("a link out of the root resolved to %q", got)
	}
}

// A tool that a user other than root could have put there is refused,
// and so is one in a directory others can write.
func TestLookPathInRootRefusesWritableTools(t *testing.T) {
	for name, spoil := range map[string]func(root string) error{
		"tool writable by others": func(root string) error {
			return os.Chmod(filepath.Join(root, "usr/bin", fakeToolName), 0o757)
		},
		"directory writable by group": func(root string) error { return os.Chmod(filepath.Join(root, "usr"), 0o775) },
		"root writable by others":     func(root string) error { return os.Chmod(root, 0o777) },
		"tool owned by another user": func(root string) error {
			if os.Getuid() != 0 {
				// Only root can give a file away; as another user the
				// same refusal is tested through the modes above.
				return os.Chmod(filepath.Join(root, "usr/bin", fakeToolName), 0o775)
			}
			return os.Chown(filepath.Join(root, "usr/bin", fakeToolName), 1000, 1000)
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := fakeRoot(t)
			must(t, spoil(root))
			_, err := Exec{Root: root}.LookPath(fakeToolName)
			if !errors.Is(err, ErrUntrusted) {
				t.Fatalf("LookPath = %v, want ErrUntrusted", err)
			}
			err = Exec{Root: root}.Run(context.Background(), fakeToolName, nil, io.Discard)
			if !errors.Is(err, ErrUntrusted) {
				t.Fatalf("Run = %v, want ErrUntrusted", err)
			}
		})
	}
}

// Run starts the tool chrooted into the root, in its "/", with the fixed
// environment. Chroot needs root (CAP_SYS_CHROOT); as another user Run
// says that it was not permitted.
func TestRunInRoot(t *testing.T) {
	root := fakeRoot(t)
	var out bytes.Buffer
	err := Exec{Root: root}.Run(context.Background(), "linked-tool", []string{"health", "--check"}, &out)
	if os.Getuid() != 0 {
		if !errors.Is(err, syscall.EPERM) {
			t.Fatalf("Run as uid %d = %v, want EPERM", os.Getuid(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), "cwd=/ marker=true args=health --check"; got != want {
		t.Fatalf("the tool saw %q, want %q", got, want)
	}
}
