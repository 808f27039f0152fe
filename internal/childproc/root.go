package childproc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// ToolDirs are the directories of the PATH host tools run with, in order.
var ToolDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Errors of LookPathInRoot.
var (
	// ErrNotFound: no such tool.
	ErrNotFound = errors.New("not installed")
	// ErrUntrusted: the tool is there, but a user other than root could
	// have written it or something it runs or loads (CheckTrust).
	ErrUntrusted = errors.New("refusing to run a tool others can write")
)

// LookPathInRoot finds a tool inside root (another root filesystem, such
// as the host's mounted into the agent's container, or "/" for the agent's
// own), resolving symbolic links the way the kernel will once the tool runs
// chrooted there, and returns its path inside root. name is a command name
// (searched in ToolDirs) or an absolute path inside root. A tool that
// someone other than root could have put or changed there — the tool, its
// interpreters, its loader, its libraries or a directory on the way to any
// of them (CheckTrust) — is ErrUntrusted: the agent runs it as root.
func LookPathInRoot(root, name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	candidates := []string{name}
	if !strings.Contains(name, "/") {
		candidates = candidates[:0]
		for _, d := range ToolDirs {
			candidates = append(candidates, d+"/"+name)
		}
	} else if !filepath.IsAbs(name) {
		return "", fmt.Errorf("%s: a tool of another root must be a name or an absolute path", name)
	}
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	var refused error
	for _, c := range candidates {
		// Checked before it is known to exist: a tool named in a directory
		// others can write is refused even while it is missing, since they
		// could put theirs there. A refused candidate is skipped for a later
		// one (the tool runs by its full path, so an earlier one shadows
		// nothing), and reported when no candidate is left.
		if err := CheckTrust(root, c); err != nil {
			if errors.Is(err, ErrUntrusted) {
				refused = err
			}
			continue
		}
		full, err := securejoin.SecureJoin(root, c)
		if err != nil {
			continue
		}
		fi, err := os.Stat(full)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		return "/" + strings.TrimPrefix(strings.TrimPrefix(full, root), "/"), nil
	}
	if refused != nil {
		return "", refused
	}
	return "", fmt.Errorf("%s: %w under %s (%s)", name, ErrNotFound, root, strings.Join(ToolDirs, ":"))
}

// untrusted says why a file or directory is not one only root can change,
// or "" when it is: owned by root (or by the agent's own user, which
// cannot chroot unless it is root) and writable by nobody else.
func untrusted(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "of unknown ownership"
	}
	if st.Uid != 0 && int(st.Uid) != os.Getuid() {
		return fmt.Sprintf("owned by uid %d", st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("writable by group or others (%v)", fi.Mode().Perm())
	}
	return ""
}
