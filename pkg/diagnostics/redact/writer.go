package redact

import (
	"bytes"
	"io"
)

// MaxLine is the longest piece of a line redacted at once. A longer line (a
// single-line JSON dump) is cut near a separator at this length; each piece
// is redacted with Overlap bytes of its neighbours on both sides in view, so
// that a secret across the cut is still seen whole, and a value that runs to
// the end of the line masks the rest of it.
const MaxLine = 1 << 20

// Overlap is how much of the neighbouring pieces a piece of an overlong line
// is redacted with.
const Overlap = 4 << 10

// ContextBytes is how much of a file before a tail window its collector
// feeds to Context: enough for a key block or a YAML block whose start is
// cut away by the window.
const ContextBytes = 64 << 10

// Writer redacts what is written to it, line by line, and writes the result
// to the underlying writer. A line is written out once the next one is
// seen (a private key's last line is known by the END line after it).
// Close flushes the rest. Memory is bounded by MaxLine, whatever the input.
type Writer struct {
	r  *Redactor
	w  io.Writer
	st State

	// buf is the current line: buf[:ctx] was written out already and is
	// kept as context for the next piece of an overlong line.
	buf     []byte
	ctx     int
	cutLine bool
	maxLine int

	// held is the last complete line, redacted, not yet written out.
	held    []byte
	hasHeld bool
	heldNL  bool

	scratch []byte
	out     []byte
	count   int
	discard bool
	err     error
}

// NewWriter returns a Writer that redacts into w.
func (r *Redactor) NewWriter(w io.Writer) *Writer { return &Writer{r: r, w: w, maxLine: MaxLine} }

// Redactions is the number of secrets masked so far.
func (w *Writer) Redactions() int { return w.count }

// Context feeds text that comes before what is written next (the part of
// a file before a tail window) without writing it out: it only sets the
// state, so that a key block or a YAML block whose start is in p is masked
// in what follows. p should end at a line end; call it before Write.
func (w *Writer) Context(p []byte) error {
	w.discard = true
	_, err := w.Write(p)
	if len(w.buf) > 0 {
		w.finishLine(false)
	}
	w.hasHeld = false
	w.held = w.held[:0]
	w.discard = false
	return err
}

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
			for len(w.buf)-w.ctx > w.maxLine+Overlap {
				w.piece()
			}
			break
		}
		if len(w.buf) == 0 && !w.cutLine {
			w.finish(p[:i], true) // the common case: no copy
		} else {
			w.buf = append(w.buf, p[:i]...)
			w.finishLine(true)
		}
		p = p[i+1:]
	}
	w.flush()
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// piece redacts and writes out the next piece of an overlong line.
func (w *Writer) piece() {
	cut := cutPoint(w.buf, w.ctx, w.ctx+w.maxLine)
	text := w.buf[:min(len(w.buf), cut+Overlap)]
	var n int
	var info lineInfo
	w.scratch, n, info = w.r.redact(w.scratch[:0], text, w.ctx, cut, &w.st, !w.cutLine, false)
	if !w.cutLine {
		w.release(info.hasEnd)
	}
	w.emit(w.scratch, false, n)
	keep := max(0, cut-Overlap)
	w.buf = append(w.buf[:0], w.buf[keep:]...)
	w.ctx = cut - keep
	w.cutLine = true
}

// finishLine redacts the rest of the current line.
func (w *Writer) finishLine(nl bool) {
	w.finish(w.buf, nl)
	w.buf = w.buf[:0]
	w.ctx = 0
	w.cutLine = false
}

// finish redacts the rest of line (line[w.ctx:] when it was cut) into the
// output, or holds it back when it may be the last line of a private key
// whose BEGIN is out of the window (the next line tells).
func (w *Writer) finish(line []byte, nl bool) {
	first := !w.cutLine
	if w.hasHeld {
		var n int
		var info lineInfo
		w.scratch, n, info = w.r.redact(w.scratch[:0], line, w.ctx, len(line), &w.st, first, true)
		w.release(info.hasEnd)
		w.finished(w.scratch, nl, n, first)
		return
	}
	start := len(w.out)
	var n int
	w.out, n, _ = w.r.redact(w.out, line, w.ctx, len(line), &w.st, first, true)
	if first && w.holds(w.out[start:]) {
		w.held = append(w.held[:0], w.out[start:]...)
		w.out = w.out[:start]
		w.hasHeld, w.heldNL = true, nl
		w.counted(n)
		return
	}
	if w.discard {
		w.out = w.out[:start]
		return
	}
	w.count += n
	if nl {
		w.out = append(w.out, '\n')
	}
	if len(w.out) > 64<<10 {
		w.flush()
	}
}

// finished writes out or holds a line redacted into a buffer of its own.
func (w *Writer) finished(b []byte, nl bool, n int, first bool) {
	if first && w.holds(b) {
		w.held = append(w.held[:0], b...)
		w.hasHeld, w.heldNL = true, nl
		w.counted(n)
		return
	}
	w.emit(b, nl, n)
}

// holds reports a redacted line to hold back: its last field is base64 that
// could be the short last line of a key block.
func (w *Writer) holds(b []byte) bool {
	// Fast refusal from the end (on every line): the last field must be
	// eight base64 bytes or more.
	end := len(b)
	for end > 0 && (isSpace(b[end-1]) || b[end-1] == ',' || b[end-1] == '"' || b[end-1] == '\'' || b[end-1] == '\\') {
		end--
	}
	for k := 1; k <= 8; k++ {
		if end-k < 0 || !isBase64(b[end-k]) {
			if !(end-k >= 1 && b[end-k] == 'n' && b[end-k-1] == '\\') {
				return false
			}
			break
		}
	}
	f := lastField(b)
	return f.std && f.to-f.from >= 8 && !plainWord(b[f.from:f.to])
}

func (w *Writer) counted(n int) {
	if !w.discard {
		w.count += n
	}
}

// release writes out the held line; endFollows masks its last field first
// (the line after it ends a private key).
func (w *Writer) release(endFollows bool) {
	if !w.hasHeld {
		return
	}
	w.hasHeld = false
	if endFollows {
		f := lastField(w.held)
		masked := append(append(append([]byte(nil), w.held[:f.from]...), Mask...), w.held[f.to:]...)
		w.held = append(w.held[:0], masked...)
		if !w.discard {
			w.count++
		}
	}
	w.emit(w.held, w.heldNL, 0)
}

func (w *Writer) emit(b []byte, nl bool, n int) {
	if w.discard {
		return
	}
	w.count += n
	w.out = append(w.out, b...)
	if nl {
		w.out = append(w.out, '\n')
	}
	// Keep what is buffered for one write small.
	if len(w.out) > 64<<10 {
		w.flush()
	}
}

func (w *Writer) flush() {
	if len(w.out) > 0 && w.err == nil {
		_, w.err = w.w.Write(w.out)
	}
	w.out = w.out[:0]
}

// cutPoint finds where to cut an overlong line: after the last separator in
// the 4 KiB before limit (and after from, what is written out already), so
// that a token is rarely cut in two. The cut always moves past from.
func cutPoint(b []byte, from, limit int) int {
	for i := limit - 1; i > limit-4096 && i > from; i-- {
		switch b[i] {
		case ' ', ',', ';', '\t', '{', '}':
			return i + 1
		}
	}
	return limit
}

// Close writes out the last line. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 || w.cutLine {
		w.finishLine(false)
	}
	w.release(false)
	w.flush()
	return w.err
}
