package remediate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LedgerFile records, under the host root, the boots in which this node's
// agent accepted a reboot: at most one reboot per boot, across agent
// restarts. It lives in the agent's state directory beside
// conditions-boot-id, which survives reboots.
const LedgerFile = "var/lib/nodemend/reboot-boots"

// ledgerCap bounds the file: a boot is compared only with the current one,
// so the last few are all that matter.
const ledgerCap = 32

// ledger is the set of boots that had their reboot, one line each:
// "BOOT ORDER TIME".
type ledger struct {
	path    string
	entries []ledgerEntry
}

type ledgerEntry struct{ boot, order, at string }

// openLedger reads the ledger under hostRoot. A missing file is empty; an
// unreadable one is an error (the caller refuses reboots: it cannot tell
// whether this boot had one).
func openLedger(hostRoot string) (*ledger, error) {
	l := &ledger{path: filepath.Join(hostRoot, LedgerFile)}
	data, err := os.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the reboot ledger: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("reading the reboot ledger %s: malformed line %q", l.path, sc.Text())
		}
		l.entries = append(l.entries, ledgerEntry{f[0], f[1], f[2]})
	}
	return l, sc.Err()
}

// boots returns boot → order of every recorded reboot.
func (l *ledger) boots() map[string]string {
	m := make(map[string]string, len(l.entries))
	for _, e := range l.entries {
		m[e.boot] = e.order
	}
	return m
}

// record adds boot's reboot by order and writes the file (atomically: a
// torn file would forget a boot, or fail every later read), keeping the
// last ledgerCap entries.
func (l *ledger) record(boot, order string, at time.Time) error {
	entries := append(append([]ledgerEntry(nil), l.entries...), ledgerEntry{boot, order, at.UTC().Format(time.RFC3339)})
	if len(entries) > ledgerCap {
		entries = entries[len(entries)-ledgerCap:]
	}
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s %s\n", e.boot, e.order, e.at)
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return err
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return err
	}
	l.entries = entries
	return nil
}
