package diagnostics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/testsupport/diagtest"
	"nodemend.dev/nodemend/pkg/diagnostics/pcap"
)

// fakeCapturer writes a chunk file every interval until its context ends: a
// stand-in for tcpdump that the chunk, upload and duration logic cannot
// tell apart from it.
type fakeCapturer struct {
	every time.Duration
	mu    sync.Mutex
	spec  pcap.Spec
	start time.Time
	end   time.Time
}

type fakeCapture struct {
	dir  string
	done chan struct{}
}

func (c *fakeCapture) Chunks() ([]string, error) { return pcap.ListChunks(c.dir) }
func (c *fakeCapture) Done() <-chan struct{}     { return c.done }
func (c *fakeCapture) Err() error                { return nil }

func (f *fakeCapturer) Start(ctx context.Context, s pcap.Spec) (pcap.Capture, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.spec, f.start = s, time.Now()
	f.mu.Unlock()
	c := &fakeCapture{dir: s.Dir, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(f.every)
		defer t.Stop()
		for i := 0; ; i++ {
			_ = os.WriteFile(filepath.Join(s.Dir, pcap.ChunkName(i)), []byte(fmt.Sprintf("pcap chunk %d", i)), 0o600)
			select {
			case <-ctx.Done():
				f.mu.Lock()
				f.end = time.Now()
				f.mu.Unlock()
				return
			case <-t.C:
			}
		}
	}()
	return c, nil
}

func (f *fakeCapturer) ran() (pcap.Spec, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end.IsZero() {
		return f.spec, -1
	}
	return f.spec, f.end.Sub(f.start)
}

func packetSpec(srv *uploadServer, n int, d time.Duration) func(*v1alpha1.NodeDiagnosticSpec) {
	return func(s *v1alpha1.NodeDiagnosticSpec) {
		s.LogCapture = nil
		q := resource.MustParse("1Mi")
		p := &v1alpha1.PacketCaptureSpec{Interface: "eth0", Filter: "tcp port 443", Duration: metav1.Duration{Duration: d}, ChunkSize: &q}
		for i := 0; i < n; i++ {
			p.UploadURLs = append(p.UploadURLs, v1alpha1.UploadURL(fmt.Sprintf("%s/c%d?X-Amz-Signature=s%d", srv.URL, i, i)))
		}
		s.PacketCapture = p
	}
}

func packetState(s v1alpha1.CaptureState) func(*v1alpha1.NodeDiagnostic) bool {
	return func(o *v1alpha1.NodeDiagnostic) bool {
		return o.Status.PacketCapture != nil && o.Status.PacketCapture.State == s && o.Status.PacketCapture.Generation == o.Generation
	}
}

// TestPacketCapture: chunks are uploaded in order as they close, one URL
// each, and the capture stops after its duration.
func TestPacketCapture(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	fc := &fakeCapturer{every: 150 * time.Millisecond}
	startAgent(t, node, h, func(o *Options) { o.Uploader = srv.uploader(); o.Capturer = fc })
	obj := create(t, node, packetSpec(srv, 30, time.Second))
	done := waitFor(t, obj.Name, "Completed", packetState(v1alpha1.CaptureCompleted))
	st := done.Status.PacketCapture
	spec, ran := fc.ran()
	if spec.Interface != "eth0" || spec.Filter != "tcp port 443" || spec.ChunkBytes != 1<<20 {
		t.Errorf("capture spec %+v", spec)
	}
	if ran < 900*time.Millisecond || ran > 3*time.Second {
		t.Errorf("a 1s capture ran %v", ran)
	}
	if st.ChunksUploaded < 3 || st.Truncated {
		t.Fatalf("status %+v", st)
	}
	var total int64
	for i := 0; i < int(st.ChunksUploaded); i++ {
		b := srv.body(fmt.Sprintf("/c%d", i))
		if string(b) != fmt.Sprintf("pcap chunk %d", i) {
			t.Fatalf("URL %d got %q", i, b)
		}
		total += int64(len(b))
	}
	if st.SizeBytes != total {
		t.Errorf("sizeBytes %d, uploaded %d", st.SizeBytes, total)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Root.Dir, OutputSubdir)); len(entries) != 0 {
		t.Errorf("capture left %v on the node", entries)
	}
}

func TestPacketCaptureURLsRunOut(t *testing.T) {
	node := newNode(t)
	h := diagtest.NewHost(t)
	srv := newUploadServer(t, nil)
	fc := &fakeCapturer{every: 50 * time.Millisecond}
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
	fc := &fakeCapturer{every: 100 * time.Millisecond}
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
