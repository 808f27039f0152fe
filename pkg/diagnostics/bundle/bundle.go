// Package bundle writes a diagnostic bundle: a .tar.gz streamed to its
// destination entry by entry (no entry, and never the whole archive, is held
// in memory), capped in compressed size, ending with manifest.json.
package bundle

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"nodemend.dev/nodemend/internal/bytecount"
)

// Reserve is kept free under the cap for the manifest, the tar trailer and
// what gzip still buffers.
const Reserve = 256 << 10

// truncatedMarker ends an entry that the size cap cut short.
const truncatedMarker = "\n[nodemend: the bundle reached its size cap here; the rest of this file was left out]\n"

// Writer streams entries into a tar.gz.
type Writer struct {
	root     string
	maxBytes int64
	out      *bytecount.Writer
	gz       *gzip.Writer
	tw       *tar.Writer
	modTime  time.Time
	full     bool
	buf      []byte
}

// Options configure a Writer.
type Options struct {
	// Root is the directory every entry is placed in, inside the archive
	// (the bundle's name without .tar.gz), so that extracting it makes one
	// directory.
	Root string
	// MaxBytes caps the compressed size; 0 means no cap.
	MaxBytes int64
	// ModTime is the time stamped on entries.
	ModTime time.Time
}

// New starts a bundle on w.
func New(w io.Writer, opts Options) *Writer {
	cw := &bytecount.Writer{W: w}
	// BestSpeed: bundling time matters more than the last 15% of size, and
	// text logs still compress 5-10x.
	gz, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	return &Writer{
		root: opts.Root, maxBytes: opts.MaxBytes, out: cw, gz: gz, tw: tar.NewWriter(gz),
		modTime: opts.ModTime, buf: make([]byte, 64<<10),
	}
}

// Full reports that the cap was reached: later entries are left out.
func (b *Writer) Full() bool { return b.full }

func (b *Writer) overCap() bool {
	return b.maxBytes > 0 && b.out.N >= b.maxBytes-Reserve
}

// ErrFull is returned by Add for an entry left out because of the cap.
var ErrFull = errors.New("left out: the bundle reached its size cap")

// Add writes an entry of exactly size bytes read from r. When the cap is
// reached during the copy, the entry is cut (a marker line, then padding
// to the declared size, which compresses to nothing) and truncated is true;
// when it was reached before, the entry is left out and ErrFull returned.
// A reader that ends early is padded too (a file that shrank while read).
func (b *Writer) Add(name string, size int64, r io.Reader) (truncated bool, err error) {
	if b.full || b.overCap() {
		b.full = true
		return false, ErrFull
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: path.Join(b.root, name), Size: size, Mode: 0o644,
		ModTime: b.modTime, Format: tar.FormatPAX,
	}
	if err := b.tw.WriteHeader(hdr); err != nil {
		return false, err
	}
	var done int64
	for done < size {
		if b.overCap() {
			b.full = true
			break
		}
		n, rerr := r.Read(b.buf[:min(int64(len(b.buf)), size-done)])
		if n > 0 {
			if _, err := b.tw.Write(b.buf[:n]); err != nil {
				return false, err
			}
			done += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// Keep the archive well-formed: pad, and report the read error.
			if perr := b.pad(size - done); perr != nil {
				return false, perr
			}
			return true, rerr
		}
	}
	if done < size {
		if err := b.pad(size - done); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// pad fills the rest of an entry: the truncation marker (when it fits), then
// newlines.
func (b *Writer) pad(n int64) error {
	if n <= 0 {
		return nil
	}
	if int64(len(truncatedMarker)) <= n {
		if _, err := io.WriteString(b.tw, truncatedMarker); err != nil {
			return err
		}
		n -= int64(len(truncatedMarker))
	}
	fill := b.buf[:min(int64(len(b.buf)), n)]
	for i := range fill {
		fill[i] = '\n'
	}
	for n > 0 {
		k := min(n, int64(len(fill)))
		if _, err := b.tw.Write(fill[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// AddFile adds the file at src (a spooled collector output).
func (b *Writer) AddFile(name, src string) (truncated bool, size int64, err error) {
	f, err := os.Open(src)
	if err != nil {
		return false, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, 0, err
	}
	truncated, err = b.Add(name, st.Size(), f)
	return truncated, st.Size(), err
}

// Close writes manifest (as manifest.json, whatever the cap) and ends the
// archive. It does not close the underlying writer.
func (b *Writer) Close(manifest any) error {
	data, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the manifest: %w", err)
	}
	data = append(data, '\n')
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(b.root, ManifestName), Size: int64(len(data)), Mode: 0o644, ModTime: b.modTime, Format: tar.FormatPAX}
	if err := b.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := b.tw.Write(data); err != nil {
		return err
	}
	if err := b.tw.Close(); err != nil {
		return err
	}
	return b.gz.Close()
}

// ManifestName is the manifest's name in the bundle's root directory.
const ManifestName = "manifest.json"
