package imagebuild

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Key is the hex SHA-256 of parts, each length-prefixed so that no two
// different lists share a key.
func Key(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Cache keeps build outputs in directories named by the digest of their
// inputs. A directory appears whole or not at all: it is filled under a
// temporary name and renamed, so an interrupted build leaves nothing a
// later one would trust, and two builds racing for one key both succeed.
type Cache struct {
	Dir string
	// Disabled builds every time, into a fresh temporary directory the
	// caller removes (to check that a build reproduces the cached one).
	Disabled bool
}

// Ensure returns the directory for kind/key, calling build to fill an
// empty directory first unless the cache already holds it. hit reports
// whether it did.
func (c Cache) Ensure(kind, key string, build func(dir string) error) (dir string, hit bool, err error) {
	final := filepath.Join(c.Dir, kind, key)
	if !c.Disabled {
		if _, err := os.Stat(final); err == nil {
			// Mark it used, for Prune.
			now := time.Now()
			os.Chtimes(final, now, now)
			return final, true, nil
		}
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, kind), 0o755); err != nil {
		return "", false, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.Dir, kind), "."+key[:min(12, len(key))]+"-")
	if err != nil {
		return "", false, err
	}
	if err := build(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", false, err
	}
	if c.Disabled {
		return tmp, false, nil
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		// Another build of the same key finished first: its result is as good.
		if _, statErr := os.Stat(final); statErr == nil {
			return final, false, nil
		}
		return "", false, fmt.Errorf("caching %s: %w", final, err)
	}
	return final, false, nil
}

// Prune removes the entries of kind that no build has used for maxAge
// (and temporary directories that old, left by interrupted builds): a
// change of sources makes new keys, and the old entries would pile up.
func (c Cache) Prune(kind string, maxAge time.Duration) error {
	dir := filepath.Join(c.Dir, kind)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-maxAge)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() || info.ModTime().After(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
