package kmsg

import (
	"maps"
	"slices"
	"strconv"
	"time"
)

// Format encodes r as /dev/kmsg does (with a final newline), escaping bytes
// below 0x20, from 0x7f, and the backslash in Message and Dict values. Dict
// keys are written in sorted order. Parse(Format(r)) gives r back for any r
// that Parse returned. Tests use it to write kmsg files.
func Format(r Record) []byte {
	b := make([]byte, 0, 32+len(r.Message)+32*len(r.Dict))
	b = strconv.AppendUint(b, uint64(r.Facility)<<3|uint64(r.Level&7), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(r.Monotonic/time.Microsecond), 10)
	b = append(b, ',')
	if r.Flags == "" {
		b = append(b, '-')
	} else {
		b = append(b, r.Flags...)
	}
	b = append(b, ';')
	b = appendEscaped(b, r.Message)
	b = append(b, '\n')
	for _, k := range slices.Sorted(maps.Keys(r.Dict)) {
		b = append(b, ' ')
		b = append(b, k...)
		b = append(b, '=')
		b = appendEscaped(b, r.Dict[k])
		b = append(b, '\n')
	}
	return b
}

func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c >= 0x7f || c == '\\' {
			// The kernel escapes bytes >= 0x7f too: UTF-8 goes through as
			// escapes and comes back whole from unescape.
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}
