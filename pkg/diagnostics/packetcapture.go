package diagnostics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

// DefaultChunkBytes is a packet-capture chunk's size when the spec has none.
const DefaultChunkBytes = 64 << 20

// DefaultCaptureDiskBytes bounds the disk a packet capture uses for chunks
// waiting to be uploaded.
const DefaultCaptureDiskBytes = 512 << 20

// maxPending is how many closed chunks may wait for upload: the disk budget
// in chunks, at least 2. With the one being written and the one being
// sent, a capture's disk use stays under budget + 2 chunks.
func maxPending(budget, chunkBytes int64) int {
	return int(max(2, budget/chunkBytes))
}

// capturePlan is when a capture runs and where its chunks go; a capture cut
// by an agent restart resumes for the time it has left, with the URLs not
// used yet.
type capturePlan struct {
	start     time.Time
	remaining time.Duration
	uploaded  int32
	sent      int64
}

func planCapture(now time.Time, spec *v1alpha1.PacketCaptureSpec, st *v1alpha1.CaptureStatus, gen int64, attempts int32) capturePlan {
	p := capturePlan{start: now, remaining: spec.Duration.Duration}
	if attempts > 1 && st != nil && st.Generation == gen && st.StartTime != nil {
		p.start = st.StartTime.Time
		p.remaining = p.start.Add(spec.Duration.Duration).Sub(now)
		p.uploaded, p.sent = st.ChunksUploaded, st.SizeBytes
	}
	return p
}

func (r *Runner) runPacketCapture(ctx context.Context, obj *v1alpha1.NodeDiagnostic, attempts int32) error {
	spec := obj.Spec.PacketCapture
	gen := obj.Generation
	fail := func(reason, msg string) error {
		return r.finish(ctx, obj.Name, gen, kindPackets, func(c *v1alpha1.CaptureStatus) {
			c.State, c.Message = v1alpha1.CaptureFailed, msg
		}, reason)
	}
	for i, u := range spec.UploadURLs {
		if err := r.opts.Uploader.Check(string(u)); err != nil {
			return fail("UploadRefused", fmt.Sprintf("uploadURLs[%d]: %v", i, err))
		}
	}
	chunkBytes := int64(DefaultChunkBytes)
	if spec.ChunkSize != nil {
		chunkBytes = spec.ChunkSize.Value()
	}
	now := r.opts.Clock.Now()
	plan := planCapture(now, spec, obj.Status.PacketCapture, gen, attempts)
	urls := spec.UploadURLs[min(int(plan.uploaded), len(spec.UploadURLs)):]
	if plan.remaining <= 0 || len(urls) == 0 {
		return r.finish(ctx, obj.Name, gen, kindPackets, func(c *v1alpha1.CaptureStatus) {
			c.State = v1alpha1.CaptureCompleted
			c.Message = fmt.Sprintf("the capture's time was over when the agent came back; %d chunks (%d bytes) were uploaded", plan.uploaded, plan.sent)
		}, "Completed")
	}
	msg := fmt.Sprintf("capturing on %s for %v", spec.Interface, plan.remaining.Round(time.Second))
	if err := r.start(ctx, obj.Name, gen, kindPackets, attempts, msg, func(c *v1alpha1.CaptureStatus) {
		c.StartTime.Time = plan.start
		c.ChunksUploaded, c.SizeBytes = plan.uploaded, plan.sent
	}); err != nil {
		return err
	}

	dir := filepath.Join(r.opts.OutputDir, fmt.Sprintf("%s%s-%d", pcapPrefix, obj.Name, gen))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("CaptureFailed", err.Error())
	}
	defer os.RemoveAll(dir)

	cctx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	go func() {
		select {
		case <-r.opts.Clock.After(plan.remaining):
			stopCapture()
		case <-cctx.Done():
		}
	}()
	capture, err := r.opts.Capturer.Start(cctx, pcap.Spec{Interface: spec.Interface, Filter: spec.Filter, Dir: dir, ChunkBytes: chunkBytes})
	if err != nil {
		return fail("CaptureFailed", err.Error())
	}
	var (
		mu         sync.Mutex
		stopReason string
		uploaded   = plan.uploaded
		sent       = plan.sent
	)
	err = pcap.Follow(ctx, capture, r.opts.Clock, time.Second, len(urls), maxPending(r.opts.CaptureDiskBytes, chunkBytes),
		func(reason string) {
			mu.Lock()
			stopReason = reason
			mu.Unlock()
			stopCapture()
		},
		func(i int, path string) error {
			n, err := r.opts.Uploader.PutFile(ctx, string(urls[i]), path)
			_ = os.Remove(path)
			if err != nil {
				return chunkErr{fmt.Errorf("chunk %d: %w", int(plan.uploaded)+i, err)}
			}
			uploaded++
			sent += n
			u, s := uploaded, sent
			_ = r.updateStatus(ctx, obj.Name, gen, func(st *v1alpha1.NodeDiagnosticStatus) {
				if cs := st.PacketCapture; cs != nil && cs.Generation == gen {
					cs.ChunksUploaded, cs.SizeBytes = u, s
					cs.Message = fmt.Sprintf("capturing on %s: %d chunks (%d bytes) uploaded", spec.Interface, u, s)
				}
			})
			return nil
		})
	// Leave nothing on the node before the status says the capture is over:
	// a reader of a finished status must not find its spool still there.
	stopCapture()
	_ = os.RemoveAll(dir)
	if ctx.Err() != nil {
		return ctx.Err() // deleted, changed, or the agent is stopping
	}
	if err != nil {
		reason := "CaptureFailed"
		switch {
		case errors.Is(err, upload.ErrRefused):
			reason = "UploadRefused"
		case isUploadErr(err):
			reason = "UploadFailed"
		}
		return r.finish(ctx, obj.Name, gen, kindPackets, func(c *v1alpha1.CaptureStatus) {
			c.State, c.ChunksUploaded, c.SizeBytes = v1alpha1.CaptureFailed, uploaded, sent
			c.Message = err.Error()
		}, reason)
	}
	mu.Lock()
	why := stopReason
	mu.Unlock()
	return r.finish(ctx, obj.Name, gen, kindPackets, func(c *v1alpha1.CaptureStatus) {
		c.State, c.ChunksUploaded, c.SizeBytes, c.Truncated = v1alpha1.CaptureCompleted, uploaded, sent, why != ""
		c.Message = fmt.Sprintf("captured on %s from %s: %d chunks (%d bytes) uploaded", spec.Interface,
			plan.start.UTC().Format(time.RFC3339), uploaded, sent)
		if why != "" {
			c.Message += "; stopped early: " + why
		}
	}, "Completed")
}

// isUploadErr tells upload failures ("chunk N: ...") from capture failures.
func isUploadErr(err error) bool {
	var ce chunkErr
	return errors.As(err, &ce)
}

type chunkErr struct{ error }

func (c chunkErr) Unwrap() error { return c.error }
