// Package journal reads the systemd journal.
//
// In production, Reader runs `journalctl --output=json --follow` and parses
// its standard output, one JSON object per line (systemd's JSON export
// format); it restarts journalctl with backoff if it exits, resuming after
// the last entry it saw. For tests and the simulation, it tails a file of
// such JSON lines instead. Both go through parseEntry.
package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"nodemend.dev/nodemend/internal/textcut"
	"nodemend.dev/nodemend/pkg/logline"
)

// MaxMessageBytes caps logline.Line.Text; longer messages are truncated at a
// UTF-8 boundary.
const MaxMessageBytes = 64 << 10

// maxUnitBytes caps logline.Line.Unit (unit names are at most 256 bytes).
const maxUnitBytes = 1024

// ErrMalformed is wrapped by every error of parseEntry.
var ErrMalformed = errors.New("journal: malformed entry")

// entry holds the raw JSON values of the fields nodemend uses (nil when
// absent).
type entry struct {
	Message    []byte // MESSAGE
	Realtime   []byte // __REALTIME_TIMESTAMP
	SystemUnit []byte // _SYSTEMD_UNIT
	Unit       []byte // UNIT
	Transport  []byte // _TRANSPORT
	PID        []byte // _PID
	UID        []byte // _UID
	Comm       []byte // _COMM
	Facility   []byte // SYSLOG_FACILITY
	Cursor     []byte // __CURSOR
}

// parseEntry decodes one entry of journalctl's JSON output into a
// logline.Line with Source logline.Journal:
//
//   - Text is MESSAGE, which journalctl writes as a string, as an array of
//     byte values (a message that is not valid UTF-8 or has control
//     characters), or as null (a field over 4096 bytes without --all); a
//     field written more than once comes as an array of those, of which the
//     first is used. Invalid UTF-8 is replaced by U+FFFD, and the text is
//     capped at MaxMessageBytes. A missing or null MESSAGE gives "".
//   - Origin and Unit say who wrote it, from the trusted fields journald
//     adds itself and no client can send (systemd.journal-fields(7)):
//     _TRANSPORT, _PID, _UID, _COMM, _SYSTEMD_UNIT. Origin.Kernel is an
//     entry of _TRANSPORT=kernel whose SYSLOG_FACILITY is absent or 0
//     (journald reads /dev/kmsg itself and writes that field from the
//     record's priority, journald-kmsg.c: a user-space write to /dev/kmsg
//     has another facility). Origin.Manager is _PID=1, Origin.Root _UID=0.
//     Unit is _SYSTEMD_UNIT; for systemd's own messages about a unit
//     (_PID=1, such as "kubelet.service: Failed with result
//     'exit-code'.", which also carry _SYSTEMD_UNIT=init.scope), the UNIT
//     they name. The UNIT and SYSLOG_IDENTIFIER of any other sender are
//     claims anyone can make (logger -t kubelet) and are not used.
//   - Time is __REALTIME_TIMESTAMP (microseconds since the epoch, as a decimal
//     string), which is required.
//
// It also returns __CURSOR ("" if absent). It never panics; errors wrap
// ErrMalformed.
func parseEntry(b []byte) (logline.Line, string, error) {
	e, err := scanEntry(b)
	if err != nil {
		return logline.Line{}, "", err
	}
	return e.line()
}

// line decodes the fields.
func (e *entry) line() (logline.Line, string, error) {
	rt, err := stringField(e.Realtime, "__REALTIME_TIMESTAMP")
	if err != nil {
		return logline.Line{}, "", err
	}
	if rt == "" {
		return logline.Line{}, "", fmt.Errorf("%w: no __REALTIME_TIMESTAMP", ErrMalformed)
	}
	usec, err := strconv.ParseInt(rt, 10, 64)
	if err != nil || usec < 0 {
		return logline.Line{}, "", fmt.Errorf("%w: __REALTIME_TIMESTAMP %q", ErrMalformed, textcut.Head(rt, 64))
	}
	msg, err := field(e.Message, "MESSAGE")
	if err != nil {
		return logline.Line{}, "", err
	}
	origin, unit, err := e.writer()
	if err != nil {
		return logline.Line{}, "", err
	}
	cursor, err := stringField(e.Cursor, "__CURSOR")
	if err != nil {
		return logline.Line{}, "", err
	}
	return logline.Line{
		Source: logline.Journal,
		Unit:   unit,
		Origin: origin,
		Text:   capValid(string(msg), MaxMessageBytes),
		Time:   time.UnixMicro(usec),
	}, cursor, nil
}

// writer is who wrote the entry and the unit it is attributed to (see
// parseEntry).
func (e *entry) writer() (logline.Origin, string, error) {
	var o logline.Origin
	var fields [6]string
	for i, f := range []struct {
		raw  []byte
		name string
	}{{e.Transport, "_TRANSPORT"}, {e.PID, "_PID"}, {e.UID, "_UID"}, {e.Comm, "_COMM"}, {e.SystemUnit, "_SYSTEMD_UNIT"}, {e.Facility, "SYSLOG_FACILITY"}} {
		v, err := stringField(f.raw, f.name)
		if err != nil {
			return o, "", err
		}
		fields[i] = capValid(v, maxUnitBytes)
	}
	o.Transport, o.PID, o.UID, o.Comm = fields[0], fields[1], fields[2], fields[3]
	unit, facility := fields[4], fields[5]
	if o.Transport == "kernel" {
		o.Kernel = facility == "" || facility == "0"
		if !o.Kernel {
			o.Facility, _ = strconv.Atoi(facility)
		}
		// The kernel transport has no sender fields; whatever else the
		// entry says came from the record's text.
		return o, "", nil
	}
	o.Manager, o.Root = o.PID == "1", o.UID == "0"
	if o.Manager {
		about, err := stringField(e.Unit, "UNIT")
		if err != nil {
			return o, "", err
		}
		if about != "" {
			unit = capValid(about, maxUnitBytes)
		}
	}
	return o, unit, nil
}

// stringField is field as a string.
func stringField(raw []byte, name string) (string, error) {
	v, err := field(raw, name)
	return string(v), err
}

// field decodes a field's value: a string, an array of byte values, null
// (nil), or an array of such values for a field that occurs more than once
// (the first one). A missing field (empty raw) is nil.
func field(raw []byte, name string) ([]byte, error) {
	return value(raw, name, true)
}

func value(raw []byte, name string, multi bool) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	switch raw[0] {
	case 'n':
		return nil, nil // null (the scanner checked the syntax)
	case '"':
		if len(raw) < 2 {
			return nil, fmt.Errorf("%w: %s: bad string", ErrMalformed, name)
		}
		v, ok := unquote(raw[1 : len(raw)-1])
		if !ok {
			return nil, fmt.Errorf("%w: %s: bad string", ErrMalformed, name)
		}
		return v, nil
	case '[':
		first := bytes.TrimSpace(raw[1:])
		if len(first) > 0 && (first[0] == ']' || '0' <= first[0] && first[0] <= '9') {
			return byteArray(raw, name)
		}
		// Not bytes: the values of a repeated field; use the first.
		if !multi {
			return nil, fmt.Errorf("%w: %s: nested arrays", ErrMalformed, name)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, name, err)
		}
		return value(elems[0], name, false)
	}
	return nil, fmt.Errorf("%w: %s is neither a string nor an array", ErrMalformed, name)
}

// unquote decodes the body of a JSON string as encoding/json does: escapes
// decoded, unpaired surrogates and invalid UTF-8 bytes each replaced by
// U+FFFD. It returns body itself when there is nothing to decode.
func unquote(body []byte) ([]byte, bool) {
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		for _, c := range body {
			if c < ' ' {
				return nil, false
			}
		}
		return body, true
	}
	out := make([]byte, 0, len(body)+8)
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) {
				return nil, false
			}
			i += 2
			switch body[i-1] {
			case '"', '\\', '/':
				out = append(out, body[i-1])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(body[i:])
				if !ok {
					return nil, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if len(body) >= i+6 && body[i] == '\\' && body[i+1] == 'u' {
						if r2, ok := hex4(body[i+2:]); ok {
							if p := utf16.DecodeRune(r, r2); p != utf8.RuneError {
								out = utf8.AppendRune(out, p)
								i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
		case c < ' ':
			return nil, false
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(body[i:])
			out = utf8.AppendRune(out, r) // RuneError for an invalid byte
			i += size
		}
	}
	return out, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// byteArray decodes a JSON array of byte values (syntax already checked by
// the scanner), keeping at most MaxMessageBytes of them.
func byteArray(raw []byte, name string) ([]byte, error) {
	out := make([]byte, 0, min(len(raw)/2, MaxMessageBytes))
	i := 1 // after '['
	for i < len(raw) {
		for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r' || raw[i] == ',') {
			i++
		}
		if i < len(raw) && raw[i] == ']' {
			return out, nil
		}
		n, j := 0, i
		for j < len(raw) && '0' <= raw[j] && raw[j] <= '9' && j-i < 4 {
			n = n*10 + int(raw[j]-'0')
			j++
		}
		if j == i || n > 255 || j < len(raw) && !strings.ContainsRune(" \t\n\r,]", rune(raw[j])) {
			return nil, fmt.Errorf("%w: %s: not a byte value at offset %d", ErrMalformed, name, i)
		}
		if len(out) < MaxMessageBytes {
			out = append(out, byte(n))
		}
		i = j
	}
	return nil, fmt.Errorf("%w: %s: unterminated array", ErrMalformed, name)
}

// capValid replaces invalid UTF-8 and cuts s to at most max bytes at a rune
// boundary.
func capValid(s string, max int) string {
	if len(s) > max {
		s = strings.Clone(s[:max]) // let the long original go
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		if len(s) > max {
			n := max
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			s = s[:n]
		}
	}
	return s
}
