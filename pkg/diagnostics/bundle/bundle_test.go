package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name string
	data []byte
}

func readAll(t *testing.T, archive []byte) []entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{h.Name, data})
	}
}

func TestEntriesAndManifest(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf, Options{Root: "bundle-x", ModTime: time.Unix(1700000000, 0)})
	if tr, err := w.Add("base/os-release", 5, strings.NewReader("hello")); err != nil || tr {
		t.Fatal(tr, err)
	}
	// A file that shrank while it was read: padded to its declared size.
	if tr, err := w.Add("kernel/dmesg", 10, strings.NewReader("abc")); err != nil || !tr {
		t.Fatalf("short reader: truncated=%v err=%v", tr, err)
	}
	m := Manifest{Version: ManifestVersion, Node: "n1", Collectors: []CollectorResult{{Name: "base/os", Duration: Duration(1500 * time.Millisecond)}}}
	if err := w.Close(m); err != nil {
		t.Fatal(err)
	}
	es := readAll(t, buf.Bytes())
	if len(es) != 3 || es[0].name != "bundle-x/base/os-release" || string(es[0].data) != "hello" ||
		es[1].name != "bundle-x/kernel/dmesg" || len(es[1].data) != 10 || !bytes.HasPrefix(es[1].data, []byte("abc")) ||
		es[2].name != "bundle-x/manifest.json" {
		t.Fatalf("entries: %+v", es)
	}
	var got Manifest
	if err := json.Unmarshal(es[2].data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Node != "n1" || got.Collectors[0].Duration != Duration(1500*time.Millisecond) {
		t.Fatalf("manifest: %+v", got)
	}
	if !strings.Contains(string(es[2].data), `"duration": "1.5s"`) {
		t.Fatalf("duration not human-readable: %s", es[2].data)
	}
}

func TestCap(t *testing.T) {
	const limit = 2 << 20
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 3<<20) // incompressible
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	var buf bytes.Buffer
	w := New(&buf, Options{Root: "b", MaxBytes: limit})
	if tr, err := w.Add("small", 4, strings.NewReader("tiny")); err != nil || tr {
		t.Fatal(tr, err)
	}
	tr, err := w.Add("big", int64(len(noise)), bytes.NewReader(noise))
	if err != nil || !tr || !w.Full() {
		t.Fatalf("big entry: truncated=%v err=%v full=%v", tr, err, w.Full())
	}
	if _, err := w.Add("after", 4, strings.NewReader("late")); !errors.Is(err, ErrFull) {
		t.Fatalf("entry after the cap: %v, want ErrFull", err)
	}
	if err := w.Close(Manifest{Truncated: true}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > limit {
		t.Fatalf("bundle is %d bytes, over its %d cap", buf.Len(), limit)
	}
	es := readAll(t, buf.Bytes())
	if len(es) != 3 || es[1].name != "b/big" || len(es[1].data) != len(noise) || !bytes.Contains(es[1].data, []byte("size cap")) || es[2].name != "b/manifest.json" {
		t.Fatalf("entries after cap: %d", len(es))
	}
}

// TestStreamingMemory adds a 256 MiB entry and checks the heap does not grow
// with it: the archive is streamed, never held.
func TestStreamingMemory(t *testing.T) {
	const size = 256 << 20
	line := []byte("Jun 12 10:00:01 node kubelet[1034]: I0612 10:00:01.123456 1034 kubelet.go:2345] SyncLoop (PLEG) event\n")
	src := &repeatReader{line: line, left: size}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(io.Discard, Options{Root: "b"})
	if _, err := w.Add("big.log", size, src); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(Manifest{}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 8<<20 {
		t.Fatalf("heap grew by %d MiB while bundling %d MiB", grown>>20, size>>20)
	}
}

type repeatReader struct {
	line []byte
	off  int
	left int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.left > 0 {
		c := copy(p[n:], r.line[r.off:])
		if int64(c) > r.left {
			c = int(r.left)
		}
		n += c
		r.left -= int64(c)
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}
