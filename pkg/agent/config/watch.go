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
			// Editors write in several steps; let them finish.
			time.Sleep(50 * time.Millisecond)
		}
		load()
	}
}
