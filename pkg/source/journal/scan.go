package journal

import (
	"bytes"
	"fmt"
)

// maxDepth bounds the nesting of skipped values.
const maxDepth = 10000 // as encoding/json

// scanEntry finds the fields nodemend uses in one JSON object and checks the
// object's syntax, without decoding the fields it skips. It is several times
// faster than encoding/json on journal entries, which carry many fields
// nodemend does not need. Like encoding/json, the last of duplicate keys wins.
// It accepts some invalid JSON inside skipped values (number formats, escape
// sequences), never panics, and returns errors wrapping ErrMalformed.
func scanEntry(b []byte) (entry, error) {
	var e entry
	s := scanner{b: b}
	s.ws()
	if !s.eat('{') {
		return e, s.errorf("not a JSON object")
	}
	s.ws()
	if s.eat('}') {
		return e, s.end()
	}
	for {
		s.ws()
		key, err := s.key()
		if err != nil {
			return e, err
		}
		s.ws()
		if !s.eat(':') {
			return e, s.errorf("want ':'")
		}
		s.ws()
		start := s.i
		if err := s.skipValue(0); err != nil {
			return e, err
		}
		if dst := e.slot(key); dst != nil {
			*dst = s.b[start:s.i]
		}
		s.ws()
		if s.eat('}') {
			return e, s.end()
		}
		if !s.eat(',') {
			return e, s.errorf("want ',' or '}'")
		}
	}
}

func (e *entry) slot(key []byte) *[]byte {
	switch string(key) { // no allocation
	case "MESSAGE":
		return &e.Message
	case "__REALTIME_TIMESTAMP":
		return &e.Realtime
	case "_SYSTEMD_UNIT":
		return &e.SystemUnit
	case "UNIT":
		return &e.Unit
	case "_TRANSPORT":
		return &e.Transport
	case "_PID":
		return &e.PID
	case "_UID":
		return &e.UID
	case "_COMM":
		return &e.Comm
	case "SYSLOG_FACILITY":
		return &e.Facility
	case "__CURSOR":
		return &e.Cursor
	}
	return nil
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrMalformed, s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end checks that only white space follows.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.errorf("data after the object")
	}
	return nil
}

// key reads an object key, decoded.
func (s *scanner) key() ([]byte, error) {
	start := s.i
	escaped, err := s.skipString()
	if err != nil {
		return nil, err
	}
	if !escaped {
		return s.b[start+1 : s.i-1], nil
	}
	k, ok := unquote(s.b[start+1 : s.i-1])
	if !ok {
		return nil, fmt.Errorf("%w: bad key", ErrMalformed)
	}
	return k, nil
}

// skipString moves past a string (s.i at its opening quote); it reports
// whether the string has escape sequences.
func (s *scanner) skipString() (escaped bool, err error) {
	if !s.eat('"') {
		return false, s.errorf("want a string")
	}
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			s.i += 2 // the escaped character is never the end
		case c < 0x20:
			return false, s.errorf("control character in a string")
		default:
			s.i++
		}
	}
	return false, s.errorf("unterminated string")
}

// skipValue moves past one JSON value.
func (s *scanner) skipValue(depth int) error {
	if s.i >= len(s.b) {
		return s.errorf("want a value")
	}
	if depth > maxDepth {
		return s.errorf("nested too deeply")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, err := s.skipString()
		return err
	case c == '{':
		s.i++
		s.ws()
		if s.eat('}') {
			return nil
		}
		for {
			s.ws()
			if _, err := s.skipString(); err != nil {
				return err
			}
			s.ws()
			if !s.eat(':') {
				return s.errorf("want ':'")
			}
			s.ws()
			if err := s.skipValue(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.eat('}') {
				return nil
			}
			if !s.eat(',') {
				return s.errorf("want ',' or '}'")
			}
		}
	case c == '[':
		s.i++
		s.ws()
		if s.eat(']') {
			return nil
		}
		for {
			s.ws()
			if err := s.skipValue(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.eat(']') {
				return nil
			}
			if !s.eat(',') {
				return s.errorf("want ',' or ']'")
			}
		}
	case c == '-' || '0' <= c && c <= '9':
	number:
		for ; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '+', '-', '.', 'e', 'E':
			default:
				break number
			}
		}
		if last := s.b[s.i-1]; last < '0' || last > '9' {
			return s.errorf("bad number")
		}
		return nil
	default:
		for _, lit := range []string{"null", "true", "false"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
				s.i += len(lit)
				return nil
			}
		}
		return s.errorf("want a value")
	}
}
