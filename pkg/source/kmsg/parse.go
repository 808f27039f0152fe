// Package kmsg reads the kernel log from /dev/kmsg.
//
// Parse decodes one record of the /dev/kmsg interface (the kernel's
// Documentation/ABI/testing/dev-kmsg):
//
//	PRI,SEQ,TS_USEC,FLAGS[,MORE...];MESSAGE\n
//	 KEY=VALUE\n
//	 ...
//
// PRI is facility<<3 | level (syslog), SEQ the record's sequence number,
// TS_USEC the monotonic time of the record in microseconds since boot, FLAGS
// "-" or, for a fragment of a line, "c" ("+" on old kernels). Further
// comma-separated header fields (e.g. "caller=T123") are ignored, as the ABI
// asks. The message and the dictionary values escape non-printable bytes and
// the backslash as \xNN.
//
// Reader follows <hostRoot>/dev/kmsg: the character device on a real host, or
// a regular file (tests, simulation) that it tails like a log file.
package kmsg

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/logline"
)

// MaxMessageBytes caps Record.Message and each dictionary value; longer ones
// are truncated (at a UTF-8 boundary).
const MaxMessageBytes = 64 << 10

// ErrMalformed is wrapped by every error of Parse.
var ErrMalformed = errors.New("kmsg: malformed record")

// Record is one kernel log record.
type Record struct {
	Facility int // syslog facility: 0 (kern) for the kernel's own messages
	Level    int // syslog level: 0 (emerg) … 7 (debug)
	Seq      uint64
	// Monotonic is the record's time since boot (the kernel's local clock,
	// which does not count time suspended).
	Monotonic time.Duration
	Flags     string
	// Message is unescaped, with invalid UTF-8 replaced by U+FFFD, capped at
	// MaxMessageBytes.
	Message string
	// Dict holds the KEY=VALUE continuation lines (e.g. SUBSYSTEM=pci,
	// DEVICE=+pci:0000:3b:00.0), values unescaped like Message; nil if none.
	Dict map[string]string
}

// Origin is who wrote the record: the kernel when its facility is 0
// (LOG_KERN). The kernel gives every record written to /dev/kmsg from user
// space a non-zero facility — LOG_USER unless the writer's "<N>" prefix
// names another non-zero one (kernel/printk/printk.c, devkmsg_write) — so
// that readers can tell injected messages from its own.
func (r Record) Origin() logline.Origin {
	return logline.Origin{Kernel: r.Facility == 0, Facility: r.Facility}
}

// Parse decodes one record: a header line, optionally followed by dictionary
// lines that start with a space. A trailing newline is optional. It never
// panics; a truncated or malformed record returns an error wrapping
// ErrMalformed.
func Parse(rec []byte) (Record, error) {
	semi := bytes.IndexByte(rec, ';')
	if semi < 0 {
		return Record{}, malformed("no ';' after the header")
	}
	header := rec[:semi]
	if bytes.IndexByte(header, '\n') >= 0 {
		return Record{}, malformed("newline in the header")
	}
	var fields [4][]byte
	rest := header
	for i := range fields {
		if i == len(fields)-1 {
			// The flags, then any further fields, which are ignored.
			fields[i], _, _ = bytes.Cut(rest, []byte{','})
			break
		}
		var ok bool
		fields[i], rest, ok = bytes.Cut(rest, []byte{','})
		if !ok {
			return Record{}, malformed("header has %d fields, want at least 4", i+1)
		}
	}
	pri, err := strconv.ParseUint(string(fields[0]), 10, 16)
	if err != nil {
		return Record{}, malformed("priority %q", fields[0])
	}
	seq, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return Record{}, malformed("sequence number %q", fields[1])
	}
	usec, err := strconv.ParseUint(string(fields[2]), 10, 64)
	if err != nil || usec > math.MaxInt64/uint64(time.Microsecond) {
		return Record{}, malformed("timestamp %q", fields[2])
	}
	if len(fields[3]) == 0 {
		return Record{}, malformed("empty flags")
	}
	r := Record{
		Facility:  int(pri >> 3),
		Level:     int(pri & 7),
		Seq:       seq,
		Monotonic: time.Duration(usec) * time.Microsecond,
		Flags:     strings.ToValidUTF8(string(fields[3]), "\uFFFD"),
	}

	body := rec[semi+1:]
	msg, dict, _ := bytes.Cut(body, []byte{'\n'})
	r.Message = unescape(msg)
	for len(dict) > 0 {
		var line []byte
		line, dict, _ = bytes.Cut(dict, []byte{'\n'})
		if len(line) == 0 {
			if len(dict) == 0 {
				break // the record's final newline
			}
			return Record{}, malformed("empty dictionary line")
		}
		key, value, err := parseDictLine(line)
		if err != nil {
			return Record{}, err
		}
		if r.Dict == nil {
			r.Dict = make(map[string]string, 2)
		}
		r.Dict[key] = value
	}
	return r, nil
}

// parseDictLine parses " KEY=VALUE".
func parseDictLine(line []byte) (key, value string, err error) {
	if len(line) == 0 || line[0] != ' ' {
		return "", "", malformed("dictionary line %q does not start with a space", textcut.Head(line, 64))
	}
	k, v, ok := bytes.Cut(line[1:], []byte{'='})
	if !ok || len(k) == 0 {
		return "", "", malformed("dictionary line %q is not KEY=VALUE", textcut.Head(line, 64))
	}
	return strings.ToValidUTF8(string(k), "\uFFFD"), unescape(v), nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// unescape decodes \xNN escapes (a backslash not followed by two hex digits is
// kept as is), replaces invalid UTF-8 and caps the result at MaxMessageBytes.
func unescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 && len(b) <= MaxMessageBytes && utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, min(len(b), MaxMessageBytes))
	for i := 0; i < len(b) && len(out) < MaxMessageBytes; i++ {
		c := b[i]
		if c == '\\' && i+3 < len(b) && b[i+1] == 'x' {
			if hi, ok := unhex(b[i+2]); ok {
				if lo, ok := unhex(b[i+3]); ok {
					out = append(out, hi<<4|lo)
					i += 3
					continue
				}
			}
		}
		out = append(out, c)
	}
	s := strings.ToValidUTF8(string(out), "\uFFFD")
	if len(s) > MaxMessageBytes {
		// Replacements can lengthen it; cut at a rune boundary.
		n := MaxMessageBytes
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return s
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
