package diagnostics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
	"nodemend.dev/nodemend/pkg/diagnostics/upload"
)

// DefaultChunkBytes is a packet-capture chunk's size when the spec has none.
const DefaultChunkBytes = 64 << 20

// DefaultCaptureDiskBytes bounds the disk a packet capture uses: the one
// file of a capture kept on the node, or the chunks waiting to be uploaded.
const DefaultCaptureDiskBytes = 512 << 20

// maxDiskUsedPercent stops a capture when the file system of the output
// directory is this full: a capture must never be what makes the kubelet
// evict pods for disk pressure (its default hard eviction is at 90% used
// of the node file system, nodefs.available<10%).
const maxDiskUsedPercent = 90

// CaptureSuffix ends the file name of a packet capture kept on the node.
const CaptureSuffix = ".pcap.gz"

// maxPending is how many complete chunks may wait for upload: the disk
// budget in chunks, at least 2. With the one being written and the one
// being sent, a capture's disk use stays under budget + 2 chunks.
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

// diskTooFull reports whether a file system with these block counts is
// too full to capture into.
func diskTooFull(total, avail uint64) bool {
	return total > 0 && (total-min(avail, total))*100 >= total*maxDiskUsedPercent
}

// checkInterface refuses what is not a network interface of the agent's
// network namespace (where tcpdump captures): libpcap also captures D-Bus
// ("dbus-system"), USB ("usbmon0"), netfilter queues and Bluetooth, none of
// which is network diagnostics and some of which carry secrets.
func checkInterface(name string) error {
	if name == "any" {
		return nil
	}
	if err := (pcap.Spec{Interface: name, Dir: "/", ChunkBytes: 1 << 20}).Validate(); err != nil {
		return err
	}
	if _, err := net.InterfaceByName(name); err != nil {
		return fmt.Errorf("%q is not a network interface of this node", name)
	}
	return nil
}

func (r *Runner) runPacketCapture(ctx context.Context, obj *v1alpha1.NodeDiagnostic, a attempt) error {
	spec := obj.Spec.PacketCapture
	fail := func(reason, msg string) error {
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.Message = v1alpha1.CaptureFailed, msg
		}, reason)
	}
	toNode := spec.Destination == v1alpha1.DestinationNode
	post := postPolicy(spec)
	if !toNode && len(spec.UploadURLs) == 0 && post == nil {
		return fail("CaptureFailed", "packetCapture needs destination: node, uploadURLs or upload")
	}
	if err := r.opts.CheckInterface(spec.Interface); err != nil {
		return fail("CaptureFailed", err.Error())
	}
	if full, err := r.opts.DiskFull(r.opts.OutputDir); err != nil || full {
		msg := fmt.Sprintf("not capturing: the node's disk holding the captures is at least %d%% full", maxDiskUsedPercent)
		if err != nil {
			msg = "not capturing: the free space of the node's disk cannot be read: " + err.Error()
		}
		return fail("CaptureFailed", msg)
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
	plan := planCapture(now, spec, obj.Status.PacketCapture, a.gen, a.number)
	if post != nil {
		// A chunk closes at the first packet boundary after chunkBytes: the
		// policy must take that much more (one packet of at most 256 KiB).
		if err := r.opts.Uploader.CheckPost(*post, now, chunkName(obj.Name, plan.start, 0), chunkBytes+pcap.MaxRecordBytes); err != nil {
			return fail("UploadRefused", "upload: "+err.Error())
		}
	}
	if toNode {
		// The file of an earlier attempt died with its process (the
		// janitor removes it at startup): this attempt writes a new one,
		// for the time the capture has left.
		plan.uploaded, plan.sent = 0, 0
	}
	urls := spec.UploadURLs[min(int(plan.uploaded), len(spec.UploadURLs)):]
	if plan.remaining <= 0 || (!toNode && post == nil && len(urls) == 0) {
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State = v1alpha1.CaptureCompleted
			c.Message = fmt.Sprintf("the capture's time was over when the agent came back; %d chunks (%d bytes) were uploaded", plan.uploaded, plan.sent)
		}, "Completed")
	}
	msg := fmt.Sprintf("capturing on %s for %v", spec.Interface, plan.remaining.Round(time.Second))
	if toNode && a.number > 1 {
		msg += fmt.Sprintf(" (the agent restarted: the packets before %s are lost)", now.UTC().Format(time.RFC3339))
	}
	if err := r.start(ctx, a, msg, func(c *v1alpha1.CaptureStatus) {
		c.StartTime.Time = plan.start
		c.ChunksUploaded, c.SizeBytes = plan.uploaded, plan.sent
	}); err != nil {
		return err
	}

	dir := filepath.Join(r.opts.OutputDir, fmt.Sprintf("%s%s-%d", pcapPrefix, a.name, a.gen))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("CaptureFailed", err.Error())
	}
	defer os.RemoveAll(dir)

	cctx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	stop := &captureStop{cancel: stopCapture}
	pspec := pcap.Spec{Interface: spec.Interface, Filter: spec.Filter, Dir: dir, ChunkBytes: chunkBytes, MaxChunks: len(urls)}
	maxChunks := len(urls)
	if toNode {
		pspec.ChunkBytes, pspec.MaxChunks = r.opts.CaptureDiskBytes, 1
	}
	if post != nil {
		// One policy takes any number of chunks: the duration (at most
		// 1h) and the disk budget bound them.
		pspec.MaxChunks, maxChunks = 0, math.MaxInt32
	}
	capture, err := r.opts.Capturer.Start(cctx, pspec)
	if err != nil {
		return fail("CaptureFailed", err.Error())
	}
	prog := r.followCapture(cctx, a, spec.Interface, toNode, now.Add(plan.remaining), plan, capture, stop)

	if toNode {
		return r.finishNodeCapture(ctx, a, obj, capture, prog, now, stop)
	}

	var uploaded, sent = plan.uploaded, plan.sent
	err = pcap.Follow(ctx, capture, r.opts.Clock, time.Second, maxChunks, maxPending(r.opts.CaptureDiskBytes, chunkBytes),
		stop.early,
		func(i int, path string) error {
			var n int64
			var err error
			if post != nil {
				n, err = r.opts.Uploader.PostFile(ctx, *post, chunkName(obj.Name, plan.start, int(plan.uploaded)+i), path)
			} else {
				n, err = r.opts.Uploader.PutFile(ctx, string(urls[i]), path)
			}
			_ = os.Remove(path)
			if err != nil {
				return chunkErr{fmt.Errorf("chunk %d: %w", int(plan.uploaded)+i, err)}
			}
			uploaded++
			sent += n
			prog.uploaded(uploaded, sent)
			return nil
		})
	// Leave nothing on the node before the status says the capture is over:
	// a reader of a finished status must not find its spool still there.
	stopCapture()
	prog.stop()
	_ = os.RemoveAll(dir)
	if ctx.Err() != nil {
		return ctx.Err() // deleted, changed, or the agent is stopping
	}
	st := capture.Stats()
	if err != nil {
		reason := "CaptureFailed"
		switch {
		case errors.Is(err, upload.ErrRefused):
			reason = "UploadRefused"
		case isUploadErr(err):
			reason = "UploadFailed"
		}
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.ChunksUploaded, c.SizeBytes = v1alpha1.CaptureFailed, uploaded, sent
			c.Packets, c.CapturedBytes = st.Packets, st.Bytes
			c.Message = err.Error()
		}, reason)
	}
	why := stop.why()
	if why == "" && st.Full && post == nil {
		why = fmt.Sprintf("all %d upload URLs used", len(spec.UploadURLs))
	}
	return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
		c.State, c.ChunksUploaded, c.SizeBytes, c.Truncated = v1alpha1.CaptureCompleted, uploaded, sent, why != ""
		c.Packets, c.CapturedBytes = st.Packets, st.Bytes
		c.Message = fmt.Sprintf("captured %d packets on %s from %s: %d chunks (%d bytes) uploaded", st.Packets, spec.Interface,
			plan.start.UTC().Format(time.RFC3339), uploaded, sent)
		if why != "" {
			c.Message += "; stopped early: " + why
		}
	}, "Completed")
}

// postPolicy is the spec's POST policy destination, nil without one.
func postPolicy(spec *v1alpha1.PacketCaptureSpec) *upload.PostPolicy {
	if spec.Upload == nil {
		return nil
	}
	return &upload.PostPolicy{URL: spec.Upload.URL, Fields: spec.Upload.Fields}
}

// chunkName is the file name of chunk i of a capture uploaded by POST
// policy (the ${filename} of its key): the object, the capture's start
// and the chunk's index, so that captures and chunks never share a key.
func chunkName(object string, start time.Time, i int) string {
	return diagnosticFileName(object, start, fmt.Sprintf("-%05d%s", i, CaptureSuffix))
}

// finishNodeCapture waits for a capture kept on the node, moves its one
// file where the kubelet serves it, and writes the final status.
func (r *Runner) finishNodeCapture(ctx context.Context, a attempt, obj *v1alpha1.NodeDiagnostic, capture pcap.Capture, prog *captureProgress,
	started time.Time, stop *captureStop) error {
	spec := obj.Spec.PacketCapture
	select {
	case <-capture.Done():
	case <-ctx.Done():
	}
	prog.stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st := capture.Stats()
	fail := func(err error) error {
		return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
			c.State, c.Message = v1alpha1.CaptureFailed, err.Error()
			c.Packets, c.CapturedBytes = st.Packets, st.Bytes
		}, "CaptureFailed")
	}
	if err := capture.Err(); err != nil {
		return fail(err)
	}
	chunks, err := capture.Chunks()
	if err == nil && len(chunks) != 1 {
		err = fmt.Errorf("the capture produced %d files, want 1", len(chunks))
	}
	if err != nil {
		return fail(err)
	}
	fileName := diagnosticFileName(obj.Name, started, CaptureSuffix)
	final := filepath.Join(r.opts.OutputDir, fileName)
	if err := os.Rename(chunks[0], final); err != nil {
		return fail(err)
	}
	fi, err := os.Stat(final)
	if err != nil {
		return fail(err)
	}
	why := stop.why()
	if why == "" && st.Full {
		why = fmt.Sprintf("the file reached the capture size limit (%d bytes)", r.opts.CaptureDiskBytes)
	}
	expiry := metav1.NewTime(r.opts.Clock.Now().Add(r.opts.Retention))
	return r.finish(ctx, a, func(c *v1alpha1.CaptureStatus) {
		c.State, c.FileName, c.SizeBytes, c.Truncated, c.ExpiryTime = v1alpha1.CaptureCompleted, fileName, fi.Size(), why != "", &expiry
		c.Packets, c.CapturedBytes = st.Packets, st.Bytes
		c.Message = fmt.Sprintf("captured %d packets (%d bytes, %d compressed) on %s from %s; on the node until %s at /api/v1/nodes/%s/proxy/logs/nodemend/%s",
			st.Packets, st.Bytes, fi.Size(), spec.Interface, started.UTC().Format(time.RFC3339), expiry.UTC().Format(time.RFC3339), r.opts.NodeName, fileName)
		if why != "" {
			c.Message += "; stopped early: " + why
		}
	}, "Completed")
}

// captureStop ends a capture and remembers why: at its duration (not
// early), or early for the first other reason given.
type captureStop struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	ended  bool
	reason string
}

// onTime ends the capture at its duration.
func (s *captureStop) onTime() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.cancel()
}

// early ends the capture before its duration, for reason.
func (s *captureStop) early(reason string) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.reason = true, reason
	}
	s.mu.Unlock()
	s.cancel()
}

// why is the reason of an early end, "" otherwise.
func (s *captureStop) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// captureProgress ends the capture at its duration or when the disk
// fills, and writes its counters to status at most once a second, off the
// capture's path: a slow API server must not slow the capture.
type captureProgress struct {
	mu       sync.Mutex
	chunks   int32
	sent     int64
	cancel   context.CancelFunc
	exited   chan struct{}
	stopOnce sync.Once
}

func (p *captureProgress) uploaded(chunks int32, sent int64) {
	p.mu.Lock()
	p.chunks, p.sent = chunks, sent
	p.mu.Unlock()
}

func (p *captureProgress) stop() {
	p.stopOnce.Do(func() {
		p.cancel()
		<-p.exited
	})
}

func (r *Runner) followCapture(ctx context.Context, a attempt, iface string, toNode bool, end time.Time, plan capturePlan,
	capture pcap.Capture, stop *captureStop) *captureProgress {
	ctx, cancel := context.WithCancel(ctx)
	p := &captureProgress{chunks: plan.uploaded, sent: plan.sent, cancel: cancel, exited: make(chan struct{})}
	deadline := r.opts.Clock.After(end.Sub(r.opts.Clock.Now()))
	go func() {
		defer close(p.exited)
		t := r.opts.Clock.NewTicker(time.Second)
		defer t.Stop()
		var written pcap.Stats
		var writtenSent int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-capture.Done():
				return
			case <-deadline:
				stop.onTime()
				return
			case <-t.C():
			}
			if full, err := r.opts.DiskFull(r.opts.OutputDir); err != nil || full {
				why := fmt.Sprintf("the node's disk holding the captures is at least %d%% full", maxDiskUsedPercent)
				if err != nil {
					why = "the free space of the node's disk cannot be read: " + err.Error()
				}
				stop.early(why)
				return
			}
			st := capture.Stats()
			p.mu.Lock()
			chunks, sent := p.chunks, p.sent
			p.mu.Unlock()
			if st == written && sent == writtenSent {
				continue
			}
			written, writtenSent = st, sent
			left := max(end.Sub(r.opts.Clock.Now()).Round(time.Second), 0)
			_ = r.updateStatus(ctx, a, func(s *v1alpha1.NodeDiagnosticStatus) {
				cs := s.PacketCapture
				if cs == nil || cs.Generation != a.gen || cs.State != v1alpha1.CaptureRunning {
					return
				}
				cs.Packets, cs.CapturedBytes = st.Packets, st.Bytes
				cs.Message = fmt.Sprintf("capturing on %s: %d packets (%d bytes, %d compressed), %v left", iface, st.Packets, st.Bytes, st.Written, left)
				if toNode {
					cs.SizeBytes = st.Written
					return
				}
				cs.ChunksUploaded, cs.SizeBytes = chunks, sent
				cs.Message += fmt.Sprintf("; %d chunks (%d bytes) uploaded", chunks, sent)
			})
		}
	}()
	return p
}

// isUploadErr tells upload failures ("chunk N: ...") from capture failures.
func isUploadErr(err error) bool {
	var ce chunkErr
	return errors.As(err, &ce)
}

type chunkErr struct{ error }

func (c chunkErr) Unwrap() error { return c.error }

// diskFull reads the file system of dir.
func diskFull(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return diskTooFull(st.Blocks, st.Bavail), nil
}
