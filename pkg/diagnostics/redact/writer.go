package redact

import (
	"bytes"
	"io"
)

// MaxLine is the longest line redacted as one piece. A longer line (a
// single-line JSON dump) is cut at a separator near this length and each
// piece is redacted on its own.
const MaxLine = 1 << 20

// Writer redacts what is written to it, line by line, and writes the result
// to the underlying writer. Close flushes a last line without a newline.
type Writer struct {
	r     *Redactor
	w     io.Writer
	st    State
	buf   []byte // an incomplete line
	out   []byte
	count int
	err   error
}

// NewWriter returns a Writer that redacts into w.
func (r *Redactor) NewWriter(w io.Writer) *Writer { return &Writer{r: r, w: w} }

// Redactions is the number of secrets masked so far.
func (w *Writer) Redactions() int { return w.count }

// Write implements io.Writer. It reports len(p) on success: the redacted
// output may be longer or shorter than the input.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			for len(w.buf) > MaxLine {
				cut := cutPoint(w.buf)
				w.line(w.buf[:cut], false)
				w.buf = append(w.buf[:0], w.buf[cut:]...)
			}
			break
		}
		if len(w.buf) > 0 {
			w.buf = append(w.buf, p[:i]...)
			w.line(w.buf, true)
			w.buf = w.buf[:0]
		} else {
			w.line(p[:i], true)
		}
		p = p[i+1:]
	}
	if len(w.out) > 0 {
		_, w.err = w.w.Write(w.out)
		w.out = w.out[:0]
	}
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

func (w *Writer) line(l []byte, nl bool) {
	var c int
	w.out, c = w.r.Line(w.out, l, &w.st)
	w.count += c
	if nl {
		w.out = append(w.out, '\n')
	}
	// Keep what is buffered for one write small.
	if len(w.out) > 64<<10 && w.err == nil {
		_, w.err = w.w.Write(w.out)
		w.out = w.out[:0]
	}
}

// cutPoint finds where to split an overlong line: after the last separator
// in its final 4 KiB, so that a token is not cut in two.
func cutPoint(b []byte) int {
	limit := MaxLine
	for i := limit - 1; i > limit-4096; i-- {
		switch b[i] {
		case ' ', ',', ';', '\t', '{', '}':
			return i + 1
		}
	}
	return limit
}

// Close flushes the last line. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 {
		w.line(w.buf, false)
		w.buf = w.buf[:0]
	}
	if len(w.out) > 0 {
		_, w.err = w.w.Write(w.out)
		w.out = w.out[:0]
	}
	return w.err
}
