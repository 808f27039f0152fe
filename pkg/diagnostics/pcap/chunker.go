package pcap

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"nodemend.dev/nodemend/internal/bytecount"
)

// The pcap file format (the libpcap "savefile", draft-ietf-opsawg-pcap): a
// 24-byte global header, then per packet a 16-byte record header (seconds,
// micro- or nanoseconds, captured length, original length) and the
// captured bytes. The magic number tells the byte order and the time
// resolution.
const (
	globalHeaderLen = 24
	recordHeaderLen = 16
	magicMicro      = 0xa1b2c3d4
	magicNano       = 0xa1b23c4d
	// MaxRecordBytes bounds one packet's captured length: tcpdump's
	// largest snap length (MAXIMUM_SNAPLEN, what -s 0 means). A record
	// header claiming more is a corrupt stream, not a packet to buffer.
	MaxRecordBytes = 262144
)

// ErrFull is returned by Chunker.Copy when the last allowed chunk is full:
// the capture has to stop.
var ErrFull = errors.New("the capture reached its size limit")

// Stats is what a capture recorded so far.
type Stats struct {
	// Packets and Bytes count the packets and their captured bytes, as
	// read from the capture (before compression).
	Packets, Bytes int64
	// Written is the compressed size of all chunks so far.
	Written int64
	// Chunks counts the chunk files started.
	Chunks int
	// Full is set once the last allowed chunk filled up.
	Full bool
}

// Chunker turns one pcap stream (tcpdump -w -) into gzip-compressed pcap
// chunk files in Dir: every chunk starts with the stream's global header,
// so each one is a capture file of its own. A chunk closes at the first
// packet boundary after its compressed size reached ChunkBytes (it ends at
// most one deflate block and one packet beyond), and is renamed from
// "<name>.part" to its final name only once complete: ListChunks sees
// complete chunks only. Memory is bounded by one packet buffer and the
// compressor's state, whatever the capture's size.
type Chunker struct {
	// Dir receives the chunks (capture-00000.pcap.gz, ...).
	Dir string
	// ChunkBytes is the compressed size at which a chunk closes.
	ChunkBytes int64
	// MaxChunks stops the stream (ErrFull) once that many chunks are
	// complete; 0 means no limit.
	MaxChunks int

	mu     sync.Mutex
	stats  Stats
	closed int64 // compressed bytes of the complete chunks
}

// Stats returns what was recorded so far; safe while Copy runs.
func (c *Chunker) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// chunk is the file being written.
type chunk struct {
	f     *os.File
	count *bytecount.Writer
	buf   *bufio.Writer
	gz    *gzip.Writer
	part  string
	final string
}

func (c *Chunker) open(i int, header []byte) (*chunk, error) {
	final := filepath.Join(c.Dir, ChunkName(i))
	part := final + partSuffix
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	ch := &chunk{f: f, part: part, final: final}
	ch.count = &bytecount.Writer{W: f}
	ch.buf = bufio.NewWriterSize(ch.count, 64<<10)
	// BestSpeed: packets are compressed on the node, next to its workload;
	// the ratio on packet data differs little between levels, the CPU a lot.
	ch.gz, _ = gzip.NewWriterLevel(ch.buf, gzip.BestSpeed)
	if _, err := ch.gz.Write(header); err != nil {
		ch.abort()
		return nil, err
	}
	c.mu.Lock()
	c.stats.Chunks++
	c.stats.Written = c.closed + ch.size()
	c.mu.Unlock()
	return ch, nil
}

// size is the compressed size so far: what reached bufio (the file's size
// once flushed); the compressor holds back at most one block.
func (ch *chunk) size() int64 { return ch.count.N + int64(ch.buf.Buffered()) }

func (ch *chunk) close() error {
	err := ch.gz.Close()
	if err == nil {
		err = ch.buf.Flush()
	}
	if err == nil {
		err = ch.f.Sync()
	}
	if cerr := ch.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(ch.part, ch.final)
	}
	if err != nil {
		_ = os.Remove(ch.part)
	}
	return err
}

func (ch *chunk) abort() {
	_ = ch.f.Close()
	_ = os.Remove(ch.part)
}

// Copy reads the pcap stream r until it ends and writes the chunks. The
// first chunk is created as soon as the global header arrives (a capture
// of no packets is still a valid, empty capture file); later ones with
// their first packet. A stream that breaks off inside a packet (a capture
// killed mid-write) ends at the last whole packet. It returns ErrFull when
// MaxChunks chunks are complete and more packets came, and an error for a
// stream that is not pcap or is corrupt; the chunks complete by then stay.
func (c *Chunker) Copy(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	header := make([]byte, globalHeaderLen)
	if _, err := io.ReadFull(br, header); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the capture ended before it wrote a pcap header")
		}
		return fmt.Errorf("reading the pcap header: %w", err)
	}
	order, err := headerOrder(header)
	if err != nil {
		return err
	}
	cur, err := c.open(0, header)
	if err != nil {
		return err
	}
	next := 1
	rec := make([]byte, recordHeaderLen+MaxRecordBytes)
	for {
		if _, err := io.ReadFull(br, rec[:recordHeaderLen]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				c.abort(cur)
				return err
			}
			break // the stream ended (between packets, or inside a torn last one)
		}
		incl := order.Uint32(rec[8:12])
		if incl > MaxRecordBytes {
			_ = c.finish(cur)
			return fmt.Errorf("corrupt pcap stream: a record claims %d captured bytes (at most %d)", incl, MaxRecordBytes)
		}
		if _, err := io.ReadFull(br, rec[recordHeaderLen:recordHeaderLen+incl]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				c.abort(cur)
				return err
			}
			break
		}
		if cur == nil {
			if c.MaxChunks > 0 && next >= c.MaxChunks {
				c.mu.Lock()
				c.stats.Full = true
				c.mu.Unlock()
				return ErrFull
			}
			if cur, err = c.open(next, header); err != nil {
				return err
			}
			next++
		}
		if _, err := cur.gz.Write(rec[:recordHeaderLen+incl]); err != nil {
			c.abort(cur)
			return err
		}
		c.mu.Lock()
		c.stats.Packets++
		c.stats.Bytes += int64(incl)
		c.stats.Written = c.closed + cur.size()
		c.mu.Unlock()
		if cur.size() >= c.ChunkBytes {
			if err := c.finish(cur); err != nil {
				return err
			}
			cur = nil
		}
	}
	if cur != nil {
		return c.finish(cur)
	}
	return nil
}

// finish completes a chunk; Written then counts its final size.
func (c *Chunker) finish(ch *chunk) error {
	if ch == nil {
		return nil
	}
	err := ch.close()
	c.mu.Lock()
	if err == nil {
		c.closed += ch.count.N
	}
	c.stats.Written = c.closed
	c.mu.Unlock()
	return err
}

func (c *Chunker) abort(ch *chunk) {
	if ch != nil {
		ch.abort()
	}
	c.mu.Lock()
	c.stats.Written = c.closed
	c.mu.Unlock()
}

func headerOrder(h []byte) (binary.ByteOrder, error) {
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if m := o.Uint32(h); m == magicMicro || m == magicNano {
			if major := o.Uint16(h[4:6]); major != 2 {
				return nil, fmt.Errorf("pcap version %d is not supported", major)
			}
			return o, nil
		}
	}
	return nil, fmt.Errorf("not a pcap stream (magic % x)", h[:4])
}
