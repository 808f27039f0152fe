package config

import (
	"bytes"
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls apply with the parsed file each time its content changes
// (including the first read), or with the error when it cannot be read or is
// invalid; the caller keeps its last good config then. It wakes on fsnotify
// events in the file's directory (which also catches the symlink swap of a
// mounted ConfigMap) and polls every pollEvery as a fallback.
func Watch(ctx context.Context, path string, pollEvery time.Duration, apply func(Config, error)) {
	var last []byte
	var lastErr string
	first := true
	load := func() {
		data, err := ReadFile(path)
		if err == nil && (first || !bytes.Equal(data, last)) {
			data, err = settled(path, data)
		}
		if err != nil {
			// Report a file that cannot be read (or is too large) once, not
			// on every poll, and again when the reason changes.
			if first || last != nil || err.Error() != lastErr {
				apply(Config{}, err)
			}
			last, lastErr, first = nil, err.Error(), false
			return
		}
		lastErr = ""
		if !first && bytes.Equal(data, last) {
			return
		}
		first, last = false, data
		c, err := Parse(data)
		apply(c, err)
	}
	load()

	var events <-chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		if w.Add(filepath.Dir(path)) == nil {
			events = w.Events
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-events:
		}
		load()
	}
}

// settleTime is how long a changed file must stay the same before it is
// applied.
const settleTime = 50 * time.Millisecond

// settled reads the file again until two reads settleTime apart agree: a
// file caught while it is rewritten (truncated, or half written: an editor
// writes in several steps, os.WriteFile truncates before it writes) must not
// be applied, even when the part read parses (an empty file is the defaults).
func settled(path string, data []byte) ([]byte, error) {
	for range 20 {
		time.Sleep(settleTime)
		again, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(again, data) {
			return data, nil
		}
		data = again
	}
	return data, nil
}
