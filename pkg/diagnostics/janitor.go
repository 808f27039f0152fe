package diagnostics

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

const (
	partialSuffix = ".partial"
	spoolPrefix   = ".spool-"
	pcapPrefix    = ".pcap-"
)

// prepareOutputDir makes the output directory, readable by root only.
func prepareOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// janitor deletes what diagnostics leave in the output directory once it is
// older than the retention, by modification time: ages survive agent
// restarts, so a bundle is never kept longer because the agent restarted.
// It only touches names diagnostics create.
type janitor struct {
	dir       string
	retention time.Duration
	clock     clock.WithTicker
	log       logr.Logger
}

// ours reports names diagnostics create: delivered files, partial bundles,
// spool and packet-capture directories.
func ours(name string) bool {
	return delivered(name) ||
		(strings.HasPrefix(name, "."+BundlePrefix) && strings.HasSuffix(name, partialSuffix)) ||
		strings.HasPrefix(name, spoolPrefix) || strings.HasPrefix(name, pcapPrefix)
}

// delivered reports the finished files waiting for download: bundles,
// packet captures and GPU diagnostic outputs. Everything else of ours is a running job's work.
func delivered(name string) bool {
	return strings.HasPrefix(name, BundlePrefix) && (strings.HasSuffix(name, BundleSuffix) || strings.HasSuffix(name, CaptureSuffix) || strings.HasSuffix(name, GPUDiagnosticSuffix))
}

// sweep deletes expired bundles. Working entries (partial bundles, spool
// and capture directories) belong to running jobs, which remove them when
// they end, however long they run; only at startup, when nothing of this
// process runs yet, are they a dead process's and go, whatever their age.
func (j *janitor) sweep(startup bool) {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		j.log.Error(err, "listing diagnostics output")
		return
	}
	now := j.clock.Now()
	for _, e := range entries {
		name := e.Name()
		if !ours(name) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		working := !delivered(name)
		switch {
		case working && !startup:
			continue
		case !working && now.Sub(info.ModTime()) < j.retention:
			continue
		}
		if err := os.RemoveAll(filepath.Join(j.dir, name)); err != nil {
			j.log.Error(err, "deleting expired diagnostics output", "name", name)
			continue
		}
		j.log.Info("deleted diagnostics output", "name", name, "age", now.Sub(info.ModTime()).Round(time.Second))
	}
}

// run sweeps every minute (or every retention/10, whichever is shorter).
func (j *janitor) run(ctx context.Context) {
	every := min(time.Minute, j.retention/10)
	t := j.clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			j.sweep(false)
		}
	}
}
