package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"nodemend.dev/nodemend/pkg/agent/remediate"
)

// ConditionsBootFile records, under the host root, the boot during which
// this node's agent last ran: the boot its conditions on the Node belong to.
// It lives in the agent's state directory, which survives reboots.
const ConditionsBootFile = "var/lib/nodemend/conditions-boot-id"

// bootRecord tells whether the conditions on the Node come from an earlier
// boot (log-derived faults are then dropped: they belong to a boot that is
// over), and records the current boot for the next start.
type bootRecord struct {
	hostRoot string
	current  string
}

// earlierBoot reads the current and the recorded boot. Unknown (no record
// yet, unreadable boot ID) is not "earlier": the faults are kept, as before
// boots were recorded.
func (b *bootRecord) earlierBoot() (bool, error) {
	cur, err := remediate.ReadBootID(b.hostRoot)
	if err != nil {
		return false, err
	}
	b.current = cur
	prev, err := os.ReadFile(filepath.Join(b.hostRoot, ConditionsBootFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p := strings.TrimSpace(string(prev))
	return p != "" && p != cur, nil
}

// record writes the current boot (atomically: a torn file would read as
// another boot).
func (b *bootRecord) record() error {
	if b.current == "" {
		return nil
	}
	p := filepath.Join(b.hostRoot, ConditionsBootFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.current+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
