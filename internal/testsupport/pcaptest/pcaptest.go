// Package pcaptest writes and reads pcap data for tests, in the libpcap
// savefile format (draft-ietf-opsawg-pcap): a 24-byte global header
// (magic, version 2.4, thiszone, sigfigs, snaplen, link type), then per
// packet a 16-byte record header (seconds, microseconds, captured length,
// original length) and the bytes.
package pcaptest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

// LinkTypeEthernet is LINKTYPE_ETHERNET.
const LinkTypeEthernet = 1

// Header is a little-endian, microsecond pcap global header.
func Header(order binary.ByteOrder, nano bool) []byte {
	h := make([]byte, 24)
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	order.PutUint32(h[0:], magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 262144)
	order.PutUint32(h[20:], LinkTypeEthernet)
	return h
}

// Record is one packet record: its header and data.
func Record(order binary.ByteOrder, sec uint32, data []byte) []byte {
	r := make([]byte, 16+len(data))
	order.PutUint32(r[0:], sec)
	order.PutUint32(r[8:], uint32(len(data)))
	order.PutUint32(r[12:], uint32(len(data)))
	copy(r[16:], data)
	return r
}

// Stream is a whole little-endian pcap stream of packets.
func Stream(packets ...[]byte) []byte {
	var b bytes.Buffer
	b.Write(Header(binary.LittleEndian, false))
	for i, p := range packets {
		b.Write(Record(binary.LittleEndian, uint32(1700000000+i), p))
	}
	return b.Bytes()
}

// Packets makes n packets of size bytes each: an Ethernet/IPv4/TCP-like
// header and a payload that is half text, half random, so that it
// compresses like real traffic rather than like zeros.
func Packets(seed uint64, n, size int) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	text := []byte("GET /api/v1/namespaces/default/pods?limit=500 HTTP/1.1\r\nHost: 10.0.0.1\r\nAccept: application/json\r\n\r\n")
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, size)
		for j := range p {
			switch {
			case j < 54:
				p[j] = byte(j * 7) // headers: mostly constant
			case j%2 == 0:
				p[j] = text[j%len(text)]
			default:
				p[j] = byte(r.Uint32())
			}
		}
		binary.BigEndian.PutUint32(p[38:], uint32(i)) // a TCP sequence number
		out[i] = p
	}
	return out
}

// File is a decoded capture file.
type File struct {
	Header  []byte
	Packets [][]byte
}

// Read decodes a pcap stream (gzip-compressed or not).
func Read(r io.Reader) (File, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return File{}, err
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return File{}, err
		}
		if data, err = io.ReadAll(zr); err != nil {
			return File{}, fmt.Errorf("gzip: %w", err)
		}
	}
	if len(data) < 24 {
		return File{}, fmt.Errorf("%d bytes: no pcap header", len(data))
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if m := binary.BigEndian.Uint32(data); m == 0xa1b2c3d4 || m == 0xa1b23c4d {
		order = binary.BigEndian
	} else if m := order.Uint32(data); m != 0xa1b2c3d4 && m != 0xa1b23c4d {
		return File{}, fmt.Errorf("bad magic % x", data[:4])
	}
	f := File{Header: data[:24]}
	for off := 24; off < len(data); {
		if off+16 > len(data) {
			return f, fmt.Errorf("torn record header at %d", off)
		}
		n := int(order.Uint32(data[off+8:]))
		if off+16+n > len(data) {
			return f, fmt.Errorf("torn record at %d", off)
		}
		f.Packets = append(f.Packets, data[off+16:off+16+n])
		off += 16 + n
	}
	return f, nil
}

// ReadFile decodes a capture file or fails the test.
func ReadFile(t testing.TB, path string) File {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := Read(fh)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}
