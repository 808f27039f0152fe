package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// errSymlink is returned when a path under the output directory is a
// symbolic link: kubectl mend never writes through one.
var errSymlink = errors.New("is a symbolic link; refusing to write through it")

// saveUnder writes a new file at path, which must lie inside dir, with what
// write produces. The output directory is the user's choice, but what is
// below it may not be: another user who can write there (a shared /tmp, a
// team share) could plant DIR/NODE as a link to ~/.ssh or /etc. So every
// directory between dir and the file is created or checked with no-follow
// semantics (a symbolic link is refused, not followed), the file goes first
// to a new temporary name created exclusively (never an existing file or
// link), and is renamed into place when complete, which replaces a name but
// never writes through it. All of it happens through an os.Root opened at
// dir, so that a link swapped in meanwhile cannot lead outside dir either.
func saveUnder(dir, path string, write func(io.Writer) error) error {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("%s is not inside the output directory %s", path, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := mkdirNoFollow(root, dir, filepath.Dir(rel)); err != nil {
		return err
	}
	switch fi, err := root.Lstat(rel); {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s %w", path, errSymlink)
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	tmp, f, err := createTemp(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// mkdirNoFollow creates rel and its parents inside root, refusing any that
// is a symbolic link or not a directory.
func mkdirNoFollow(root *os.Root, dir, rel string) error {
	if rel == "." {
		return nil
	}
	p := ""
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		fi, err := root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			// Made by us, or by someone at the same moment: look again.
			if fi, err = root.Lstat(p); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s %w", filepath.Join(dir, p), errSymlink)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", filepath.Join(dir, p))
		}
	}
	return nil
}

// createTemp creates a new file in root's directory rel, exclusively: an
// existing name (a planted link included) is never opened.
func createTemp(root *os.Root, rel string) (string, *os.File, error) {
	for range 100 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := filepath.Join(rel, ".download-"+hex.EncodeToString(b[:])+".part")
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return name, f, err
	}
	return "", nil, fmt.Errorf("cannot create a temporary file in %s", rel)
}
