package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodemend.dev/nodemend/internal/testsupport/pcaptest"
)

// readChunks decodes every chunk of dir, checks each starts with header,
// and returns all packets in order.
func readChunks(t *testing.T, dir string, header []byte) (packets [][]byte, sizes []int64) {
	t.Helper()
	chunks, err := ListChunks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		f := pcaptest.ReadFile(t, c)
		if !bytes.Equal(f.Header, header) {
			t.Fatalf("%s: header % x, want % x", c, f.Header, header)
		}
		packets = append(packets, f.Packets...)
		fi, _ := os.Stat(c)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", c, fi.Mode())
		}
		sizes = append(sizes, fi.Size())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+partSuffix)); len(left) > 0 {
		t.Fatalf("unfinished chunks left: %v", left)
	}
	return packets, sizes
}

// TestChunkerRotates: a 6 MB stream in 1 MiB chunks: every chunk a
// capture file of its own (header, whole packets), closed just past the
// size, all packets kept in order, and the counters right.
func TestChunkerRotates(t *testing.T) {
	dir := t.TempDir()
	packets := pcaptest.Packets(7, 4000, 1500)
	c := &Chunker{Dir: dir, ChunkBytes: 1 << 20}
	if err := c.Copy(bytes.NewReader(pcaptest.Stream(packets...))); err != nil {
		t.Fatal(err)
	}
	got, sizes := readChunks(t, dir, pcaptest.Header(binary.LittleEndian, false))
	if len(got) != len(packets) {
		t.Fatalf("%d packets out, %d in", len(got), len(packets))
	}
	for i := range got {
		if !bytes.Equal(got[i], packets[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if len(sizes) < 3 {
		t.Fatalf("only %d chunks for %d bytes", len(sizes), 4000*1500)
	}
	var total int64
	for i, s := range sizes {
		total += s
		if i < len(sizes)-1 && (s < 1<<20 || s > 1<<20+64<<10+MaxRecordBytes) {
			t.Errorf("chunk %d is %d bytes for a 1 MiB chunk size", i, s)
		}
	}
	st := c.Stats()
	if st.Packets != 4000 || st.Bytes != 4000*1500 || st.Written != total || st.Chunks != len(sizes) || st.Full {
		t.Fatalf("stats %+v, files %d bytes in %d chunks", st, total, len(sizes))
	}
	if total > 4000*1500*95/100 { // half the payload is random, as encrypted traffic is
		t.Errorf("compressed %d of %d bytes: not compressed", total, 4000*1500)
	}
}

// TestChunkerFormats: both byte orders and nanosecond timestamps pass
// through unchanged; a capture of no packets is an empty capture file.
func TestChunkerFormats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order binary.ByteOrder
		nano  bool
		n     int
	}{{"big-endian", binary.BigEndian, false, 3}, {"nanoseconds", binary.LittleEndian, true, 3}, {"no packets", binary.LittleEndian, false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := pcaptest.Header(tc.order, tc.nano)
			stream := append([]byte{}, h...)
			for _, p := range pcaptest.Packets(1, tc.n, 60) {
				stream = append(stream, pcaptest.Record(tc.order, 1, p)...)
			}
			c := &Chunker{Dir: dir, ChunkBytes: 1 << 20}
			if err := c.Copy(bytes.NewReader(stream)); err != nil {
				t.Fatal(err)
			}
			got, sizes := readChunks(t, dir, h)
			if len(got) != tc.n || len(sizes) != 1 {
				t.Fatalf("%d packets in %d chunks", len(got), len(sizes))
			}
		})
	}
}

// TestChunkerMaxChunks: the chunk limit ends the stream with ErrFull and
// keeps exactly the complete chunks.
func TestChunkerMaxChunks(t *testing.T) {
	dir := t.TempDir()
	c := &Chunker{Dir: dir, ChunkBytes: 1 << 20, MaxChunks: 2}
	err := c.Copy(bytes.NewReader(pcaptest.Stream(pcaptest.Packets(3, 5000, 1500)...)))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("err %v", err)
	}
	_, sizes := readChunks(t, dir, pcaptest.Header(binary.LittleEndian, false))
	if st := c.Stats(); len(sizes) != 2 || !st.Full || st.Packets >= 5000 {
		t.Fatalf("%d chunks, stats %+v", len(sizes), st)
	}
}

// TestChunkerBadStreams: what is not pcap, or is corrupt, is refused
// without buffering what a record claims; a stream torn inside its last
// packet (a capture killed mid-write) keeps the whole packets.
func TestChunkerBadStreams(t *testing.T) {
	good := pcaptest.Stream(pcaptest.Packets(5, 3, 100)...)
	huge := append(append([]byte{}, pcaptest.Stream()...), pcaptest.Record(binary.LittleEndian, 1, nil)...)
	binary.LittleEndian.PutUint32(huge[24+8:], 1<<31) // claims 2 GiB
	pcapng := append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, make([]byte, 40)...)
	v1 := pcaptest.Stream()
	binary.LittleEndian.PutUint16(v1[4:], 1)
	for _, tc := range []struct {
		name    string
		stream  []byte
		err     string
		packets int
	}{
		{"empty", nil, "before it wrote a pcap header", -1},
		{"short header", good[:10], "reading the pcap header", -1},
		{"pcapng", pcapng, "not a pcap stream", -1},
		{"old version", v1, "pcap version 1", -1},
		{"record too large", huge, "claims 2147483648 captured bytes", 0},
		{"torn in a record header", good[:len(good)-116+5], "", 2},
		{"torn in a packet", good[:len(good)-50], "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := (&Chunker{Dir: dir, ChunkBytes: 1 << 20}).Copy(bytes.NewReader(tc.stream))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if tc.packets < 0 {
				if chunks, _ := ListChunks(dir); len(chunks) != 0 {
					t.Fatalf("chunks %v from no stream", chunks)
				}
				return
			}
			got, _ := readChunks(t, dir, good[:24])
			if len(got) != tc.packets {
				t.Fatalf("%d packets kept, want %d", len(got), tc.packets)
			}
		})
	}
}

// TestChunkerMemoryBounded: allocations do not grow with the capture: ten
// times the packets, the same allocations (the compressor's and the
// buffers', per chunk).
func TestChunkerMemoryBounded(t *testing.T) {
	small := pcaptest.Stream(pcaptest.Packets(9, 500, 1500)...)
	large := pcaptest.Stream(pcaptest.Packets(9, 5000, 1500)...)
	allocs := func(stream []byte) float64 {
		return testing.AllocsPerRun(3, func() {
			dir := t.TempDir()
			if err := (&Chunker{Dir: dir, ChunkBytes: 64 << 20}).Copy(bytes.NewReader(stream)); err != nil {
				t.Fatal(err)
			}
		})
	}
	a, b := allocs(small), allocs(large)
	if b > a+20 {
		t.Fatalf("%v allocations for 500 packets, %v for 5000: memory grows with the capture", a, b)
	}
}

// FuzzChunker: any stream either fails cleanly or yields chunks that are
// valid capture files holding exactly the packets counted.
func FuzzChunker(f *testing.F) {
	f.Add(pcaptest.Stream(pcaptest.Packets(1, 3, 64)...))
	f.Add(pcaptest.Stream())
	f.Add([]byte{0xd4, 0xc3, 0xb2, 0xa1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		dir := t.TempDir()
		c := &Chunker{Dir: dir, ChunkBytes: 1 << 20}
		err := c.Copy(bytes.NewReader(stream))
		chunks, _ := ListChunks(dir)
		if err != nil && len(stream) < 24 && len(chunks) > 0 {
			t.Fatalf("chunks from a stream without header: %v", chunks)
		}
		var n int64
		for _, ch := range chunks {
			n += int64(len(pcaptest.ReadFile(t, ch).Packets))
		}
		if st := c.Stats(); st.Packets != n {
			t.Fatalf("%d packets counted, %d in the files", st.Packets, n)
		}
	})
}

// BenchmarkChunker: compression throughput of the capture path on
// traffic-like packets, and the compressed size.
func BenchmarkChunker(b *testing.B) {
	stream := pcaptest.Stream(pcaptest.Packets(11, 20000, 1400)...)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	var written int64
	for b.Loop() {
		dir := b.TempDir()
		c := &Chunker{Dir: dir, ChunkBytes: 64 << 20}
		if err := c.Copy(bytes.NewReader(stream)); err != nil {
			b.Fatal(err)
		}
		written = c.Stats().Written
	}
	b.ReportMetric(float64(written)/float64(len(stream)), "compressed/raw")
}
