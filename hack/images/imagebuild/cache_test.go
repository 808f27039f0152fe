package imagebuild

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A key's directory is built once; a failed build leaves nothing behind;
// a disabled cache builds every time into a directory of its own.
func TestCache(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	key := Key("base", "bookworm", "systemd")
	builds := 0
	build := func(dir string) error {
		builds++
		return os.WriteFile(filepath.Join(dir, "layer.tar.gz"), []byte("layer"), 0o644)
	}
	dir, hit, err := c.Ensure("base", key, build)
	if err != nil || hit || builds != 1 {
		t.Fatalf("first Ensure: %s %v %v, %d builds", dir, hit, err, builds)
	}
	again, hit, err := c.Ensure("base", key, build)
	if err != nil || !hit || again != dir || builds != 1 {
		t.Fatalf("second Ensure: %s %v %v, %d builds", again, hit, err, builds)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "layer.tar.gz")); string(b) != "layer" {
		t.Errorf("cached content %q", b)
	}

	other := Key("base", "bookworm", "systemd,tcpdump")
	if _, _, err := c.Ensure("base", other, func(string) error { return errors.New("mirror unreachable") }); err == nil {
		t.Fatal("a failed build was reported as done")
	}
	entries, _ := os.ReadDir(filepath.Join(c.Dir, "base"))
	if len(entries) != 1 {
		t.Errorf("after a failed build the cache holds %d entries, want the one good key", len(entries))
	}

	off := Cache{Dir: c.Dir, Disabled: true}
	fresh, hit, err := off.Ensure("base", key, build)
	if err != nil || hit || fresh == dir || builds != 2 {
		t.Fatalf("disabled cache: %s %v %v, %d builds", fresh, hit, err, builds)
	}
	os.RemoveAll(fresh)
}

// Prune removes entries unused for longer than its age, keeps the rest,
// and a hit counts as a use.
func TestCachePrune(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	build := func(dir string) error { return nil }
	old, _, _ := c.Ensure("binary", Key("old"), build)
	used, _, _ := c.Ensure("binary", Key("used"), build)
	fresh, _, _ := c.Ensure("binary", Key("fresh"), build)
	long := time.Now().Add(-10 * 24 * time.Hour)
	os.Chtimes(old, long, long)
	os.Chtimes(used, long, long)
	if _, hit, _ := c.Ensure("binary", Key("used"), build); !hit {
		t.Fatal("no hit")
	}
	if err := c.Prune("binary", 3*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{old: false, used: true, fresh: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(dir), err == nil, want)
		}
	}
	if err := c.Prune("never-built", time.Hour); err != nil {
		t.Errorf("pruning a kind never built: %v", err)
	}
}

// Keys tell apart lists that concatenate to the same string.
func TestKeySeparatesParts(t *testing.T) {
	if Key("ab", "c") == Key("a", "bc") || Key("a") == Key("a", "") {
		t.Error("different part lists share a key")
	}
	if Key("a", "b") != Key("a", "b") {
		t.Error("a key is not stable")
	}
}
