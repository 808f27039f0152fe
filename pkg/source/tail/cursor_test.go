package tail

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cursorReader reads c's new lines of path and compares them, joined by
// "|", with want.
func cursorReader(t *testing.T, c *Cursor, path string) func(want string) {
	return func(want string) {
		t.Helper()
		var got []string
		if err := c.Read(path, func(line []byte) { got = append(got, string(line)) }); err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(got, "|"); s != want {
			t.Fatalf("got %q, want %q", trunc(s), trunc(want))
		}
	}
}

func TestCursor(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.log")
	var c Cursor
	read := cursorReader(t, &c, p)
	read("") // missing file
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	read("old") // created after the first read: read from its start
	appendFile(t, p, "a\nb")
	read("a") // a partial line waits for its newline
	appendFile(t, p, "c\n\n")
	read("bc|") // ... and is joined with it; an empty line is a line, as for Follow
	read("")
	if err := os.WriteFile(p, []byte("n\n"), 0o644); err != nil { // truncated and rewritten
		t.Fatal(err)
	}
	read("n")
	// Rotation by rename: the new file at the path is read from its start;
	// what the old one held back is not joined to it.
	appendFile(t, p, "held")
	read("")
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("a longer new file\n"), 0o644); err != nil { // longer than the old offset: not a truncation
		t.Fatal(err)
	}
	read("a longer new file")
	c.Reset()
	read("") // after Reset, an existing file is read from its end again
	appendFile(t, p, "after\n")
	read("after")
}

func TestCursorStartsAtTheEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "y.log")
	if err := os.WriteFile(p, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Cursor{}
	read := cursorReader(t, &c, p)
	read("") // an existing file is read from its end: old lines say nothing about now
	appendFile(t, p, "x\n")
	read("x")
}

func TestCursorBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "z.log")
	c := Cursor{MaxRead: 64, MaxLineBytes: 8}
	read := cursorReader(t, &c, p)
	read("")
	// A burst larger than one read is skipped ahead to its last MaxRead
	// bytes, not buffered: the cut line's tail is a line of its own.
	appendFile(t, p, strings.Repeat("x", 100)+"\n"+strings.Repeat("y", 50)+"\nlast\n")
	read("xxxxxxx|yyyyyyyy|last")
	// A line longer than MaxLineBytes is cut there, the rest dropped.
	appendFile(t, p, "0123456789abc\nok\n")
	read("01234567|ok")
}

// FuzzCursorLines writes data to a file in two appends read by a Cursor in
// between: the lines handed over hold no newline, and with lines short
// enough not to be cut they are exactly data's lines (the fuzz test the
// networking monitor's own splitter had, now on the one splitter).
func FuzzCursorLines(f *testing.F) {
	f.Add([]byte("a\nb\n\nc"), 2)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		p := filepath.Join(t.TempDir(), "f.log")
		c := Cursor{MaxLineBytes: 1 << 20}
		var got [][]byte
		emit := func(line []byte) {
			if bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("line %q holds a newline", line)
			}
			got = append(got, bytes.Clone(line))
		}
		if err := c.Read(p, emit); err != nil { // missing: the file is then read from its start
			t.Fatal(err)
		}
		appendFile(t, p, string(data[:cut]))
		if err := c.Read(p, emit); err != nil {
			t.Fatal(err)
		}
		appendFile(t, p, string(data[cut:]))
		if err := c.Read(p, emit); err != nil {
			t.Fatal(err)
		}
		want := bytes.Split(data, []byte("\n"))
		want = want[:len(want)-1] // the unterminated rest is held back
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d: %q", len(got), len(want), data)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d: %q, want %q", i, got[i], want[i])
			}
		}
	})
}
