package diagnostics

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/internal/testsupport/pcaptest"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
)

// fakeCapturer stands in for tcpdump: it writes a pcap stream of numbered
// packets (a burst every interval) into the real compression path
// (pcap.StartStream), until its context ends. Its chunks close at
// 1/shrink of the requested size, so that a test sees several chunks
// without capturing megabytes.
type fakeCapturer struct {
	every  time.Duration
	shrink int64
	mu     sync.Mutex
	spec   pcap.Spec
	start  time.Time
	end    time.Time
	sent   atomic.Int64
}

const fakeBurst, fakePacketBytes = 40, 1400

func (f *fakeCapturer) Start(ctx context.Context, s pcap.Spec) (pcap.Capture, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.spec, f.start = s, time.Now()
	f.mu.Unlock()
	shrunk := s
	if f.shrink > 1 {
		shrunk.ChunkBytes = s.ChunkBytes / f.shrink
	}
	ctx, stop := context.WithCancel(ctx)
	packets := pcaptest.Packets(42, fakeBurst, fakePacketBytes)
	return pcap.StartStream(shrunk, func(w io.Writer) error {
		defer func() {
			f.mu.Lock()
			f.end = time.Now()
			f.mu.Unlock()
		}()
		if _, err := w.Write(pcaptest.Stream()); err != nil {
			return nil
		}
		t := time.NewTicker(f.every)
		defer t.Stop()
		for {
			for _, p := range packets {
				n := f.sent.Add(1)
				binary.BigEndian.PutUint64(p[:8], uint64(n)) // packet number, for order checks
				if _, err := w.Write(pcaptest.Record(binary.LittleEndian, uint32(n), p)); err != nil {
					return nil
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}, stop), nil
}

func (f *fakeCapturer) ran() (pcap.Spec, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end.IsZero() {
		return f.spec, -1
	}
	return f.spec, f.end.Sub(f.start)
}

// numbered checks that packets carry consecutive numbers from first.
func numbered(t *testing.T, packets [][]byte, first uint64) uint64 {
	t.Helper()
	for i, p := range packets {
		if n := binary.BigEndian.Uint64(p[:8]); n != first+uint64(i) {
			t.Fatalf("packet %d is number %d, want %d", i, n, first+uint64(i))
		}
	}
	return first + uint64(len(packets))
}

func packetSpec(srv *uploadServer, n int, d time.Duration) func(*v1alpha1.NodeDiagnosticSpec) {
	return func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture = nil
		q := resource.MustParse("1Mi")
		p := &v1alpha1.PacketCaptureSpec{Interface: "lo", Filter: "tcp port 443", Duration: metav1.Duration{Duration: d}, ChunkSize: &q}
		for i := 0; i < n; i++ {
			p.UploadURLs = append(p.UploadURLs, v1alpha1.UploadURL(fmt.Sprintf("%s/c%d?X-Amz-Signature=s%d", srv.URL, i, i)))
		}
		s.PacketCapture = p
	}
}

func nodeCaptureSpec(d time.Duration) func(*v1alpha1.NodeDiagnosticSpec) {
	return func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture = nil
		s.PacketCapture = &v1alpha1.PacketCaptureSpec{Interface: "lo", Filter: "udp", Duration: metav1.Duration{Duration: d},
			Destination: v1alpha1.DestinationNode}
	}
}

func packetState(s v1alpha1.CaptureState) func(*v1alpha1.NodeDiagnostic) bool {
	return func(o *v1alpha1.NodeDiagnostic) bool {
		return o.Status.PacketCapture != nil && o.Status.PacketCapture.State == s && o.Status.PacketCapture.Generation == o.Generation
	}
}

// TestPacketCapture: chunks are uploaded in order as they close, one URL
// each, every one a gzip pcap file of its own; together they hold every
// packet once, in order; the capture stops after its duration.
func TestPacketCapture(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	fc := &fakeCapturer{every: 100 * time.Millisecond, shrink: 4}
	startAgent(t, node, h, func(o *Options) { o.Uploader = srv.uploader(); o.Capturer = fc })
	obj := create(t, node, packetSpec(srv, 30, 2*time.Second))
	done := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted))
	st := done.Status.PacketCapture
	spec, ran := fc.ran()
	if spec.Interface != "lo" || spec.Filter != "tcp port 443" || spec.ChunkBytes != 1<<20 || spec.MaxChunks != 30 {
		t.Errorf("capture spec %+v", spec)
	}
	if ran < 1900*time.Millisecond || ran > 5*time.Second {
		t.Errorf("a 2s capture ran %v", ran)
	}
	if st.ChunksUploaded < 2 || st.Truncated {
		t.Fatalf("status %+v", st)
	}
	var total int64
	next := uint64(1)
	for i := 0; i < int(st.ChunksUploaded); i++ {
		b := srv.body(fmt.Sprintf("/c%d", i))
		f, err := pcaptest.Read(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		next = numbered(t, f.Packets, next)
		total += int64(len(b))
	}
	if st.SizeBytes != total || st.Packets != int64(next-1) || st.CapturedBytes != st.Packets*fakePacketBytes {
		t.Errorf("status %+v; uploaded %d bytes, %d packets", st, total, next-1)
	}
	if !strings.Contains(st.Message, fmt.Sprintf("captured %d packets on lo", st.Packets)) {
		t.Errorf("message %q", st.Message)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir)); len(entries) != 0 {
		t.Errorf("capture left %v on the node", entries)
	}
}

func TestPacketCaptureURLsRunOut(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	fc := &fakeCapturer{every: 10 * time.Millisecond, shrink: 16}
	startAgent(t, node, h, func(o *Options) { o.Uploader = srv.uploader(); o.Capturer = fc })
	obj := create(t, node, packetSpec(srv, 2, 30*time.Minute))
	done := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted))
	st := done.Status.PacketCapture
	if st.ChunksUploaded != 2 || !st.Truncated || !strings.Contains(st.Message, "all 2 upload URLs used") {
		t.Fatalf("status %+v", st)
	}
	if srv.body("/c2") != nil {
		t.Fatal("a chunk went past the last URL")
	}
}

// TestPacketCaptureCancelledOnDelete: deleting the object stops the capture
// at once.
func TestPacketCaptureCancelledOnDelete(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	fc := &fakeCapturer{every: 10 * time.Millisecond, shrink: 16}
	startAgent(t, node, h, func(o *Options) { o.Uploader = srv.uploader(); o.Capturer = fc })
	obj := create(t, node, packetSpec(srv, 50, time.Hour))
	waitFor(t, obj.Name, "a chunk uploaded", func(o *v1alpha1.NodeDiagnostic) bool {
		return o.Status.PacketCapture != nil && o.Status.PacketCapture.ChunksUploaded > 0
	})
	if err := nd.Delete(context.Background(), obj.Name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ran := fc.ran(); ran >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the capture went on after its object was deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPacketCaptureOnNode: destination node: progress (packets, bytes)
// in status while it runs, then one .pcap.gz where the kubelet's /logs/
// serves bundles (0600), holding every packet counted, kept 10 minutes.
func TestPacketCaptureOnNode(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	fc := &fakeCapturer{every: 20 * time.Millisecond}
	startAgent(t, node, h, func(o *Options) { o.Capturer = fc })
	obj := create(t, node, nodeCaptureSpec(3*time.Second))
	running := waitFor(t, obj.Name, "progress", func(o *v1alpha1.NodeDiagnostic) bool {
		cs := o.Status.PacketCapture
		return cs != nil && cs.State == v1alpha1.CaptureRunning && cs.Packets > 0 && cs.SizeBytes > 0
	})
	if cs := running.Status.PacketCapture; !strings.Contains(cs.Message, "packets") || !strings.Contains(cs.Message, "left") {
		t.Errorf("progress message %q", cs.Message)
	}
	done := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted))
	st := done.Status.PacketCapture
	if spec, _ := fc.ran(); spec.MaxChunks != 1 || spec.ChunkBytes != DefaultCaptureDiskBytes {
		t.Errorf("capture spec %+v", spec)
	}
	if !strings.HasPrefix(st.FileName, BundlePrefix+obj.Name+"-") || !strings.HasSuffix(st.FileName, CaptureSuffix) || st.Truncated {
		t.Fatalf("status %+v", st)
	}
	path := filepath.Join(h.Root.Dir, OutputSubdir, st.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != st.SizeBytes {
		t.Errorf("file mode %v size %d, status %d", fi.Mode(), fi.Size(), st.SizeBytes)
	}
	f := pcaptest.ReadFile(t, path)
	if numbered(t, f.Packets, 1); int64(len(f.Packets)) != st.Packets || st.Packets < 2*fakeBurst {
		t.Fatalf("%d packets in the file, status %d", len(f.Packets), st.Packets)
	}
	if st.ExpiryTime == nil || st.ExpiryTime.Sub(st.CompletionTime.Time).Round(time.Minute) != DefaultRetention {
		t.Errorf("expiry %v after completion %v", st.ExpiryTime, st.CompletionTime)
	}
	if !strings.Contains(st.Message, "/api/v1/nodes/"+node+"/proxy/logs/nodemend/"+st.FileName) {
		t.Errorf("message %q", st.Message)
	}
	entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir))
	if len(entries) != 1 {
		t.Errorf("output directory holds %v", entries)
	}
}

// TestPacketCaptureOnNodeLimits: the file stops at the capture budget,
// and a disk filling up ends the capture early; both deliver what they
// have, marked truncated.
func TestPacketCaptureOnNodeLimits(t *testing.T) {
	t.Run("size cap", func(t *testing.T) {
		node := newNode(t)
		h := diagtest.NewHost(t)
		fc := &fakeCapturer{every: 5 * time.Millisecond, shrink: 8}
		startAgent(t, node, h, func(o *Options) { o.Capturer = fc; o.CaptureDiskBytes = 1 << 20 })
		obj := create(t, node, nodeCaptureSpec(time.Hour))
		st := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted)).Status.PacketCapture
		if !st.Truncated || !strings.Contains(st.Message, "reached the capture size limit") || st.SizeBytes < 128<<10 {
			t.Fatalf("status %+v", st)
		}
		pcaptest.ReadFile(t, filepath.Join(h.Root.Dir, OutputSubdir, st.FileName))
	})
	t.Run("disk full", func(t *testing.T) {
		node := newNode(t)
		h := diagtest.NewHost(t)
		fc := &fakeCapturer{every: 10 * time.Millisecond}
		var checks atomic.Int32
		startAgent(t, node, h, func(o *Options) {
			o.Capturer = fc
			o.DiskFull = func(string) (bool, error) { return checks.Add(1) > 2, nil } // fills after the start
		})
		obj := create(t, node, nodeCaptureSpec(time.Hour))
		st := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted)).Status.PacketCapture
		if !st.Truncated || !strings.Contains(st.Message, "disk holding the captures is at least 90% full") || st.Packets == 0 {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("disk full at the start", func(t *testing.T) {
		node := newNode(t)
		h := diagtest.NewHost(t)
		fc := &fakeCapturer{every: 10 * time.Millisecond}
		startAgent(t, node, h, func(o *Options) {
			o.Capturer = fc
			o.DiskFull = func(string) (bool, error) { return true, nil }
		})
		obj := create(t, node, nodeCaptureSpec(time.Hour))
		st := waitFor(t, obj.Name, "Failed", packetState(v1alpha1.CaptureFailed)).Status.PacketCapture
		if !strings.Contains(st.Message, "not capturing") {
			t.Fatalf("status %+v", st)
		}
		if spec, _ := fc.ran(); spec.Dir != "" {
			t.Fatal("the capture started on a full disk")
		}
	})
}

// TestPacketCaptureInterfaces: only network interfaces of the node are
// captured; libpcap's other capture sources (D-Bus, USB, netfilter) are
// refused before anything starts.
func TestPacketCaptureInterfaces(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	fc := &fakeCapturer{every: 10 * time.Millisecond}
	startAgent(t, node, h, func(o *Options) { o.Capturer = fc })
	for _, iface := range []string{"dbus-system", "usbmon0", "nflog", "nfqueue", "no-such-if0"} {
		obj := create(t, node, func(s *v1alpha1.NodeDiagnosticSpec) {
			nodeCaptureSpec(time.Second)(s)
			s.PacketCapture.Interface = iface
		})
		st := waitFor(t, obj.Name, "Failed", packetState(v1alpha1.CaptureFailed)).Status.PacketCapture
		if !strings.Contains(st.Message, "is not a network interface of this node") {
			t.Errorf("%s: %q", iface, st.Message)
		}
	}
	if spec, _ := fc.ran(); spec.Dir != "" {
		t.Fatal("a capture started on a refused interface")
	}
	for _, iface := range []string{"lo", "any"} {
		if err := checkInterface(iface); err != nil {
			t.Errorf("%s refused: %v", iface, err)
		}
	}
}

func TestDiskTooFull(t *testing.T) {
	for _, tc := range []struct {
		total, avail uint64
		want         bool
	}{{100, 11, false}, {100, 10, true}, {100, 0, true}, {1000, 101, false}, {0, 0, false}, {100, 200, false}} {
		if got := diskTooFull(tc.total, tc.avail); got != tc.want {
			t.Errorf("diskTooFull(%d, %d) = %v", tc.total, tc.avail, got)
		}
	}
}

func TestPlanCapture(t *testing.T) {
	now := time.Date(2024, 6, 12, 10, 30, 0, 0, time.UTC)
	spec := &v1alpha1.PacketCaptureSpec{Duration: metav1.Duration{Duration: 10 * time.Minute}}
	started := metav1.NewTime(now.Add(-4 * time.Minute))
	running := &v1alpha1.CaptureStatus{State: v1alpha1.CaptureRunning, Generation: 3, StartTime: &started, ChunksUploaded: 5, SizeBytes: 500}
	cases := []struct {
		name     string
		st       *v1alpha1.CaptureStatus
		gen      int64
		attempts int32
		want     capturePlan
	}{
		{"first attempt", nil, 3, 1, capturePlan{start: now, remaining: 10 * time.Minute}},
		{"resumed after a restart", running, 3, 2, capturePlan{start: started.Time, remaining: 6 * time.Minute, uploaded: 5, sent: 500}},
		{"other generation starts over", running, 4, 2, capturePlan{start: now, remaining: 10 * time.Minute}},
	}
	for _, tc := range cases {
		if got := planCapture(now, spec, tc.st, tc.gen, tc.attempts); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
