package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Links planted below the output directory — by another user of a shared
// directory — are never written through: not as the node's directory, not
// as a directory above it, not as the file itself (dangling or not), not
// even a link that stays inside the output directory. Nothing changes
// outside it, and no temporary file is left behind.
func TestSaveUnderRefusesSymbolicLinks(t *testing.T) {
	write := func(w io.Writer) error { _, err := io.WriteString(w, "bundle"); return err }
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir, victim string)
		path  string // relative to dir
	}{
		{"the node directory", func(t *testing.T, dir, victim string) {
			symlink(t, victim, filepath.Join(dir, "n1"))
		}, "n1/bundle.tar.gz"},
		{"a directory above", func(t *testing.T, dir, victim string) {
			symlink(t, victim, filepath.Join(dir, "a"))
		}, "a/n1/bundle.tar.gz"},
		{"the file", func(t *testing.T, dir, victim string) {
			mkdir(t, filepath.Join(dir, "n1"))
			symlink(t, filepath.Join(victim, "authorized_keys"), filepath.Join(dir, "n1", "bundle.tar.gz"))
		}, "n1/bundle.tar.gz"},
		{"the file, dangling", func(t *testing.T, dir, victim string) {
			symlink(t, filepath.Join(victim, "new"), filepath.Join(dir, "n1-logs.tar.gz"))
		}, "n1-logs.tar.gz"},
		{"a link inside the output directory", func(t *testing.T, dir, victim string) {
			mkdir(t, filepath.Join(dir, "other"))
			symlink(t, "other", filepath.Join(dir, "n1"))
		}, "n1/bundle.tar.gz"},
		{"a relative link out", func(t *testing.T, dir, victim string) {
			symlink(t, "../victim", filepath.Join(dir, "n1"))
		}, "n1/bundle.tar.gz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, victim := filepath.Join(base, "out"), filepath.Join(base, "victim")
			mkdir(t, dir)
			mkdir(t, victim)
			if err := os.WriteFile(filepath.Join(victim, "authorized_keys"), []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, dir, victim)
			err := saveUnder(dir, filepath.Join(dir, tc.path), write)
			if !errors.Is(err, errSymlink) {
				t.Fatalf("saveUnder = %v, want a refusal of the link", err)
			}
			if !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			entries, _ := os.ReadDir(victim)
			if len(entries) != 1 {
				t.Errorf("the victim directory has %d entries, want 1", len(entries))
			}
			if b, _ := os.ReadFile(filepath.Join(victim, "authorized_keys")); string(b) != "keep" {
				t.Errorf("the victim file was written: %q", b)
			}
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && strings.HasSuffix(p, ".part") {
					t.Errorf("left behind %s", p)
				}
				return nil
			})
		})
	}
}

// Without links, the file is written, an older one replaced, and the
// directories in between made.
func TestSaveUnderWrites(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n1", "bundle.tar.gz")
	for _, content := range []string{"first", "second"} {
		if err := saveUnder(dir, p, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Fatalf("read %q %v, want %q", b, err, content)
		}
	}
	// A failed write leaves the older file and no temporary file.
	boom := errors.New("boom")
	if err := saveUnder(dir, p, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("saveUnder = %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "n1")); len(entries) != 1 {
		t.Errorf("n1 has %d entries after a failed write, want 1", len(entries))
	}
	if err := saveUnder(dir, filepath.Join(dir, "..", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Error("a path outside the output directory was accepted")
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}
