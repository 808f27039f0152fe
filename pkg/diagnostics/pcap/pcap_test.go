package pcap

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/internal/testsupport/pcaptest"
)

func TestTcpdumpArgs(t *testing.T) {
	cases := []struct {
		spec Spec
		want []string
	}{
		{Spec{Interface: "eth0", Dir: "/d", ChunkBytes: 64 << 20},
			[]string{"-i", "eth0", "-n", "-U", "-Z", "root", "-s", "0", "-w", "-"}},
		{Spec{Interface: "any", Filter: "tcp port 443 and not host 10.0.0.1", Dir: "/d", ChunkBytes: 1 << 20},
			[]string{"-i", "any", "-n", "-U", "-Z", "root", "-s", "0", "-w", "-", "--", "tcp port 443 and not host 10.0.0.1"}},
		// A filter is always one argument after "--": never an option,
		// never split or interpreted by a shell.
		{Spec{Interface: "eth0", Filter: "port 53; rm -rf / $(id)", Dir: "/d", ChunkBytes: 1_000_000},
			[]string{"-i", "eth0", "-n", "-U", "-Z", "root", "-s", "0", "-w", "-", "--", "port 53; rm -rf / $(id)"}},
	}
	for _, tc := range cases {
		if got := TcpdumpArgs(tc.spec); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("TcpdumpArgs(%+v) =\n%q\nwant\n%q", tc.spec, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Spec{Interface: "eth0", Dir: "/d", ChunkBytes: 1 << 20}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Spec){
		"interface with space": func(s *Spec) { s.Interface = "eth0 -w" },
		"interface too long":   func(s *Spec) { s.Interface = "abcdefghijklmnop" },
		"option as filter":     func(s *Spec) { s.Filter = "-w /etc/x" },
		"control character":    func(s *Spec) { s.Filter = "tcp\x00" },
		"tiny chunks":          func(s *Spec) { s.ChunkBytes = 1000 },
		"relative dir":         func(s *Spec) { s.Dir = "d" },
	} {
		s := ok
		mut(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestChunkNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"capture-00010.pcap.gz", "capture-00000.pcap.gz", "capture-00002.pcap.gz", "capture-00001.pcap.gz",
		"capture-00003.pcap.gz.part", "other", "capture-0001.pcap.gz", "capture-0000x.pcap.gz", "capture-00001.pcap"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListChunks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if want := []string{"capture-00000.pcap.gz", "capture-00001.pcap.gz", "capture-00002.pcap.gz", "capture-00010.pcap.gz"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("chunks %v, want %v", names, want)
	}
	for i := 0; i < 120_000; i += 997 {
		if j, ok := ChunkIndex(ChunkName(i)); !ok || j != i {
			t.Fatalf("ChunkIndex(ChunkName(%d)) = %d %v", i, j, ok)
		}
	}
}

// scripted is a capture whose complete chunks the test writes.
type scripted struct {
	dir  string
	done chan struct{}
	err  error
}

func (s *scripted) Chunks() ([]string, error) { return ListChunks(s.dir) }
func (s *scripted) Done() <-chan struct{}     { return s.done }
func (s *scripted) Err() error                { return s.err }
func (s *scripted) Stats() Stats              { return Stats{} }

func (s *scripted) write(t *testing.T, i int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, ChunkName(i)), []byte("chunk"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writing leaves chunk i half written, as the Chunker does.
func (s *scripted) writing(t *testing.T, i int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, ChunkName(i)+partSuffix), []byte("chu"), 0o600); err != nil {
		t.Fatal(err)
	}
}

type followRun struct {
	clk     *clocktesting.FakeClock
	cap     *scripted
	got     chan int
	stopped chan string
	result  chan error
}

func follow(t *testing.T, maxChunks, maxPending int, onChunk func(i int) error) *followRun {
	f := &followRun{
		clk: clocktesting.NewFakeClock(time.Unix(1700000000, 0)),
		cap: &scripted{dir: t.TempDir(), done: make(chan struct{})},
		got: make(chan int, 100), stopped: make(chan string, 10), result: make(chan error, 1),
	}
	go func() {
		f.result <- Follow(context.Background(), f.cap, f.clk, time.Second, maxChunks, maxPending,
			func(reason string) { f.stopped <- reason },
			func(i int, path string) error {
				if filepath.Base(path) != ChunkName(i) {
					t.Errorf("chunk %d is %s", i, path)
				}
				f.got <- i
				if onChunk != nil {
					return onChunk(i)
				}
				return nil
			})
	}()
	return f
}

// tick advances the poll once Follow waits on it.
func (f *followRun) tick(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f.clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Follow is not polling")
		}
		time.Sleep(time.Millisecond)
	}
	f.clk.Step(time.Second)
}

func (f *followRun) expect(t *testing.T, want ...int) {
	t.Helper()
	for _, w := range want {
		select {
		case i := <-f.got:
			if i != w {
				t.Fatalf("got chunk %d, want %d", i, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("chunk %d never handed over", w)
		}
	}
	select {
	case i := <-f.got:
		t.Fatalf("unexpected chunk %d", i)
	default:
	}
}

// TestFollowHandsOverClosedChunks: a chunk goes once complete (the one
// still written is not listed), in order; the last when the capture ends.
func TestFollowHandsOverClosedChunks(t *testing.T) {
	f := follow(t, 10, 10, nil)
	f.cap.writing(t, 0)
	f.tick(t)
	f.expect(t) // chunk 0 is still being written
	f.cap.write(t, 0)
	f.cap.write(t, 1)
	f.cap.writing(t, 2)
	f.tick(t)
	f.expect(t, 0, 1)
	f.cap.write(t, 2)
	close(f.cap.done)
	f.expect(t, 2)
	if err := <-f.result; err != nil {
		t.Fatal(err)
	}
}

// TestFollowAfterDeletes: chunks are handed over by their index, also
// when onChunk deletes each one (as uploads do), over several polls.
func TestFollowAfterDeletes(t *testing.T) {
	var f *followRun
	f = follow(t, 10, 10, func(i int) error { return os.Remove(filepath.Join(f.cap.dir, ChunkName(i))) })
	f.cap.write(t, 0)
	f.cap.write(t, 1)
	f.tick(t)
	f.expect(t, 0, 1)
	f.cap.write(t, 2)
	f.cap.write(t, 3)
	f.tick(t)
	f.expect(t, 2, 3)
	f.cap.write(t, 4)
	close(f.cap.done)
	f.expect(t, 4)
	if err := <-f.result; err != nil {
		t.Fatal(err)
	}
}

// TestFollowStopsWhenURLsRunOut: chunks past the last URL stop the capture
// and are not handed over.
func TestFollowStopsWhenURLsRunOut(t *testing.T) {
	f := follow(t, 2, 10, nil)
	for i := 0; i < 4; i++ {
		f.cap.write(t, i)
	}
	f.tick(t)
	f.expect(t, 0, 1)
	if r := <-f.stopped; r != "all 2 upload URLs used" {
		t.Fatalf("stop reason %q", r)
	}
	close(f.cap.done)
	if err := <-f.result; err != nil {
		t.Fatal(err)
	}
	f.expect(t)
	if left, _ := ListChunks(f.cap.dir); len(left) != 2 {
		t.Fatalf("chunks past the last URL left on disk: %v", left)
	}
}

// TestFollowStopsWhenUploadsLag: when complete chunks pile up behind a
// slow upload, the capture stops rather than fill the disk.
func TestFollowStopsWhenUploadsLag(t *testing.T) {
	var once sync.Once
	release := make(chan struct{})
	f := follow(t, 100, 2, func(int) error { once.Do(func() { <-release }); return nil })
	f.cap.write(t, 0)
	f.tick(t)
	f.expect(t, 0) // its upload hangs
	for i := 1; i < 5; i++ {
		f.cap.write(t, i)
	}
	f.cap.writing(t, 5)
	close(release)
	f.tick(t) // chunks 1..4 complete, 5 being written: 4 wait
	if r := <-f.stopped; r != "uploads do not keep up: 4 chunks wait" {
		t.Fatalf("stop reason %q", r)
	}
	f.expect(t, 1, 2, 3, 4)
	f.cap.write(t, 5)
	close(f.cap.done)
	f.expect(t, 5)
	if err := <-f.result; err != nil {
		t.Fatal(err)
	}
}

func TestFollowUploadError(t *testing.T) {
	boom := errors.New("403 Forbidden")
	f := follow(t, 10, 10, func(int) error { return boom })
	f.cap.write(t, 0)
	close(f.cap.done)
	f.expect(t, 0)
	if err := <-f.result; !errors.Is(err, boom) {
		t.Fatalf("result %v", err)
	}
	if r := <-f.stopped; r == "" {
		t.Fatal("no stop")
	}
}

// TestRealTcpdump captures real packets with tcpdump (installed by
// hack/ensure-deps.sh) on the loopback interface, for TCP connections this
// test makes to itself, compresses them through the pipe, and stops it
// through its context: the chunk is a gzip pcap file with those packets.
func TestRealTcpdump(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := (&Tcpdump{Commands: command.Exec{}}).Start(ctx, Spec{Interface: "lo", Filter: "tcp port " + strconv.Itoa(port), Dir: dir, ChunkBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// tcpdump needs a moment to open the capture: connect until packets
	// show up in the stream (-U writes each packet as it is captured).
	deadline := time.Now().Add(15 * time.Second)
	for c.Stats().Packets < 10 && time.Now().Before(deadline) {
		if conn, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			buf := make([]byte, 5)
			_, _ = conn.Read(buf)
			conn.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump did not stop")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	chunks, _ := c.Chunks()
	if len(chunks) != 1 {
		t.Fatalf("chunks %v", chunks)
	}
	f := pcaptest.ReadFile(t, chunks[0])
	st := c.Stats()
	if len(f.Packets) < 10 || int64(len(f.Packets)) != st.Packets {
		t.Fatalf("%d packets in the file, %d counted", len(f.Packets), st.Packets)
	}
	if fi, _ := os.Stat(chunks[0]); fi.Size() != st.Written {
		t.Fatalf("file %d bytes, counted %d", fi.Size(), st.Written)
	}
}

// TestStartStreamFull: once the chunk limit is reached, the producer is
// stopped and unblocked, and the capture ends without error.
func TestStartStreamFull(t *testing.T) {
	dir := t.TempDir()
	stopped := make(chan struct{})
	var once sync.Once
	packets := pcaptest.Packets(1, 100, 1400)
	c := StartStream(Spec{Dir: dir, ChunkBytes: 1 << 20, MaxChunks: 2}, func(w io.Writer) error {
		if _, err := w.Write(pcaptest.Stream()); err != nil {
			return err
		}
		for i := 0; ; i++ {
			rec := pcaptest.Record(binary.LittleEndian, uint32(i), packets[i%len(packets)])
			if _, err := w.Write(rec); err != nil {
				<-stopped // a write failed: the stop must have come first
				return nil
			}
		}
	}, func() { once.Do(func() { close(stopped) }) })
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the capture did not end at its chunk limit")
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	chunks, _ := c.Chunks()
	if st := c.Stats(); len(chunks) != 2 || !st.Full || st.Chunks != 2 {
		t.Fatalf("chunks %v, stats %+v", chunks, st)
	}
}

// TestStartStreamProducerFails: the capture's own error is the one
// reported, not the stream's.
func TestStartStreamProducerFails(t *testing.T) {
	boom := errors.New("tcpdump: eth9: No such device exists")
	c := StartStream(Spec{Dir: t.TempDir(), ChunkBytes: 1 << 20}, func(io.Writer) error { return boom }, func() {})
	<-c.Done()
	if !errors.Is(c.Err(), boom) {
		t.Fatalf("err %v", c.Err())
	}
}
