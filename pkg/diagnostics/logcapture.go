package diagnostics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/diagnostics/bundle"
	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/diagnostics/collectors"
	"nodemend.dev/nodemend/pkg/diagnostics/redact"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

// DefaultSince is how far back time-based logs go by default.
const DefaultSince = 24 * time.Hour

// BundlePrefix starts every bundle's file name.
const BundlePrefix = "nodediagnostic-"

// BundleSuffix ends a bundle's file name.
const BundleSuffix = ".tar.gz"

// BundleFileName names the bundle of object name captured at t: unique per
// capture, safe as a path element, at most 255 bytes.
func BundleFileName(name string, t time.Time) string {
	return diagnosticFileName(name, t, BundleSuffix)
}

// diagnosticFileName names what object name captured at t (a bundle, a
// packet capture): the object's name is a DNS subdomain, so the whole is a
// safe path element, at most 255 bytes.
func diagnosticFileName(name string, t time.Time, suffix string) string {
	if len(name) > 200 {
		name = name[:200]
	}
	return BundlePrefix + name + "-" + t.UTC().Format("20060102T150405Z") + suffix
}

// runLogCapture makes a bundle and delivers it. A cancelled capture (object
// deleted or changed, agent stopping) writes no final status.
func (r *Runner) runLogCapture(ctx context.Context, obj *v1alpha1.NodeDiagnostic, a attempt) error {
	spec := obj.Spec.LogCapture
	dest := spec.Destination
	if dest == "" {
		dest = v1alpha1.DestinationNode
	}
	if dest != v1alpha1.DestinationNode {
		if err := r.opts.Uploader.Check(dest); err != nil {
			return r.finish(ctx, a, func(cs *v1alpha1.CaptureStatus) {
				cs.State, cs.Message = v1alpha1.CaptureFailed, err.Error()
			}, "UploadRefused")
		}
	}
	// A GPU diagnostic of the same object goes into the bundle: wait for it.
	var gpuFile string
	if obj.Spec.GPUDiagnostic != nil {
		if err := r.start(ctx, a, "waiting for the GPU diagnostic of this object to finish", nil); err != nil {
			return err
		}
		f, err := r.gpuOutput(ctx, obj)
		if err != nil {
			return err
		}
		gpuFile = f
	}
	now := r.opts.Clock.Now()
	since := DefaultSince
	if spec.Since != nil {
		since = spec.Since.Duration
	}
	env := &collectors.Env{
		HostRoot: r.opts.HostRoot, NodeName: r.opts.NodeName, Commands: r.opts.Commands, Netlink: r.opts.Netlink,
		Since: now.Add(-since), Now: now, LogTailBytes: r.opts.LogTailBytes, Client: r.opts.Client,
		Gatherer: r.opts.Gatherer, EffectiveConfig: r.opts.EffectiveConfig, GPUDiagnosticFile: gpuFile,
		Cloud: r.opts.Cloud, IPAMDIntrospection: r.opts.IPAMDIntrospection, IPAMDMetrics: r.opts.IPAMDMetrics,
	}
	if r.opts.CRISocket != nil {
		env.CRISocket = r.opts.CRISocket()
	}
	cs := r.opts.Collectors(env, spec.Categories)
	total := int32(len(cs))
	if err := r.start(ctx, a, fmt.Sprintf("collecting: 0/%d collectors done", total),
		func(c *v1alpha1.CaptureStatus) { c.CollectorsTotal = total }); err != nil {
		return err
	}

	fileName := BundleFileName(obj.Name, now)
	partial := filepath.Join(r.opts.OutputDir, "."+fileName+partialSuffix)
	res, err := r.writeBundle(ctx, a, obj, env, cs, partial, strings.TrimSuffix(fileName, ".tar.gz"))
	if ctx.Err() != nil {
		_ = os.Remove(partial)
		return ctx.Err()
	}
	if err != nil {
		_ = os.Remove(partial)
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.Message = v1alpha1.CaptureFailed, "writing the bundle: "+err.Error()
		}, "BundleFailed")
	}
	summary := res.summary()
	errs := res.errors()

	if dest == v1alpha1.DestinationNode {
		final := filepath.Join(r.opts.OutputDir, fileName)
		if err := os.Rename(partial, final); err != nil {
			_ = os.Remove(partial)
			return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
				c.State, c.Message = v1alpha1.CaptureFailed, err.Error()
			}, "BundleFailed")
		}
		expiry := metav1.NewTime(r.opts.Clock.Now().Add(r.opts.Retention))
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.FileName, c.SizeBytes, c.Truncated, c.Errors = v1alpha1.CaptureCompleted, fileName, res.size, res.truncated, errs
			c.CollectorsDone, c.ExpiryTime = total, &expiry
			c.Message = fmt.Sprintf("%s; on the node until %s at /api/v1/nodes/%s/proxy/logs/nodemend/%s",
				summary, expiry.UTC().Format(time.RFC3339), r.opts.NodeName, fileName)
		}, "Completed")
	}

	if err := r.start(ctx, a, fmt.Sprintf("uploading %d bytes", res.size), func(c *v1alpha1.CaptureStatus) {
		c.CollectorsTotal, c.CollectorsDone, c.SizeBytes = total, total, res.size
	}); err != nil {
		_ = os.Remove(partial)
		return err
	}
	sent, err := r.opts.Uploader.PutFile(ctx, dest, partial)
	_ = os.Remove(partial)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		reason := "UploadFailed"
		if errors.Is(err, upload.ErrRefused) {
			reason = "UploadRefused"
		}
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.Message, c.Errors = v1alpha1.CaptureFailed, err.Error(), errs
		}, reason)
	}
	host := dest
	if i := strings.Index(host, "://"); i >= 0 {
		host = strings.SplitN(host[i+3:], "/", 2)[0]
	}
	return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
		c.State, c.SizeBytes, c.Truncated, c.Errors = v1alpha1.CaptureCompleted, sent, res.truncated, errs
		c.CollectorsTotal, c.CollectorsDone = total, total
		c.Message = fmt.Sprintf("%s; uploaded to %s", summary, host)
	}, "Completed")
}

type bundleResult struct {
	size       int64
	truncated  bool
	collectors []bundle.CollectorResult
	redactions int
	took       time.Duration
}

func (b bundleResult) summary() string {
	failed, skipped := 0, 0
	for _, c := range b.collectors {
		if c.Error != "" {
			failed++
		}
		if c.Skipped != "" {
			skipped++
		}
	}
	s := fmt.Sprintf("%d collectors (%d failed, %d did not apply), %d secrets redacted, %d bytes in %v",
		len(b.collectors), failed, skipped, b.redactions, b.size, b.took.Round(time.Millisecond))
	if b.truncated {
		s += ", cut at the size cap"
	}
	return s
}

// errors lists failed collectors for status (at most 64, as the CRD allows).
func (b bundleResult) errors() []v1alpha1.CollectorError {
	var out []v1alpha1.CollectorError
	for _, c := range b.collectors {
		if c.Error != "" && len(out) < 64 {
			out = append(out, v1alpha1.CollectorError{Collector: textcut.Ellipsis(c.Name, 128), Message: textcut.Ellipsis(c.Error, 512)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Collector < out[j].Collector })
	return out
}

// writeBundle streams the bundle to path (0600).
func (r *Runner) writeBundle(ctx context.Context, a attempt, obj *v1alpha1.NodeDiagnostic, env *collectors.Env, cs []collect.Collector, path, root string) (bundleResult, error) {
	start := r.opts.Clock.Now()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return bundleResult{}, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	b := bundle.New(bw, bundle.Options{Root: root, MaxBytes: r.opts.MaxBundleBytes, ModTime: env.Now})

	prog := r.startProgress(ctx, a, int32(len(cs)))
	results, redactions, err := collect.Run(ctx, cs, b, collect.Options{
		SpoolDir: filepath.Join(r.opts.OutputDir, spoolPrefix+root), Timeout: r.opts.CollectorTimeout,
		Redactor: redact.New(), Clock: r.opts.Clock,
		OnDone: func(_ bundle.CollectorResult, done, _ int) { prog.done.Store(int32(done)) },
	})
	prog.stop()
	if err != nil {
		return bundleResult{}, err
	}
	cats := make([]string, 0, len(obj.Spec.LogCapture.Categories))
	for _, c := range obj.Spec.LogCapture.Categories {
		cats = append(cats, string(c))
	}
	if len(cats) == 0 {
		for _, c := range v1alpha1.AllLogCategories() {
			cats = append(cats, string(c))
		}
	}
	m := bundle.Manifest{
		Version: bundle.ManifestVersion, Node: r.opts.NodeName, NodeDiagnostic: obj.Name, Generation: obj.Generation,
		Categories: cats, Since: env.Since, Started: start, Finished: r.opts.Clock.Now(),
		MaxBytes: r.opts.MaxBundleBytes, Truncated: b.Full(), Redactions: redactions, Collectors: results,
	}
	if err := b.Close(m); err != nil {
		return bundleResult{}, err
	}
	if err := bw.Flush(); err != nil {
		return bundleResult{}, err
	}
	if err := f.Sync(); err != nil {
		return bundleResult{}, err
	}
	st, err := f.Stat()
	if err != nil {
		return bundleResult{}, err
	}
	return bundleResult{size: st.Size(), truncated: b.Full(), collectors: results, redactions: redactions, took: r.opts.Clock.Since(start)}, nil
}

// progress writes collectorsDone to status at most once a second, off the
// bundle's path: a slow API server must not slow the capture.
type progress struct {
	done   atomic.Int32
	cancel context.CancelFunc
	exited chan struct{}
}

func (r *Runner) startProgress(ctx context.Context, a attempt, total int32) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{cancel: cancel, exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		t := r.opts.Clock.NewTicker(time.Second)
		defer t.Stop()
		var written int32
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			d := p.done.Load()
			if d == written {
				continue
			}
			written = d
			_ = r.updateStatus(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
				if cs := s.LogCapture; cs != nil && cs.Generation == a.gen && cs.State == v1alpha1.CaptureRunning {
					cs.CollectorsDone = d
					cs.Message = fmt.Sprintf("collecting: %d/%d collectors done", d, total)
				}
			})
		}
	}()
	return p
}

func (p *progress) stop() {
	p.cancel()
	<-p.exited
}
