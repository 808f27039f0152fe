package progress

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// screen is a terminal that knows what the live board sends: text, "\n",
// "\r", ESC[nA (cursor up) and ESC[J (erase to the end of the screen).
type screen struct {
	lines []string
	row   int
}

func (s *screen) feed(t *testing.T, data string) {
	t.Helper()
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '\n':
			s.row++
		case c == '\r':
		case c == 0x1b:
			j := i + 2
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(data[i+2 : j])
			switch data[j] {
			case 'A':
				s.row -= n
			case 'J':
				s.lines = s.lines[:min(s.row, len(s.lines))]
			default:
				t.Fatalf("unexpected sequence %q", data[i:j+1])
			}
			i = j
		default:
			for len(s.lines) <= s.row {
				s.lines = append(s.lines, "")
			}
			s.lines[s.row] += data[i : i+1]
		}
	}
	if s.row < 0 {
		t.Fatalf("cursor above the screen")
	}
}

// syncBuffer is written by the board's redraw goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestLive: the block shows what is at work and the summary; finished
// items leave one permanent line each, in the order they finished; at the
// end only those and the summary remain.
func TestLive(t *testing.T) {
	var out syncBuffer
	clk := &clock{}
	clk.ns.Store(time.Unix(1700000000, 0).UnixNano())
	nodes := []string{"ip-10-0-1-1", "ip-10-0-1-22", "ip-10-0-1-333"}
	b := New(&out, nodes, Options{Live: true, Every: time.Millisecond, Now: clk.now})
	var scr screen
	settle := func() {
		time.Sleep(20 * time.Millisecond)
		scr.feed(t, out.take())
	}
	b.Update("ip-10-0-1-1", "collecting", "3/51 collectors")
	b.Update("ip-10-0-1-22", "validating", "waiting for the node's agent")
	settle()
	want := []string{
		"  ip-10-0-1-1    collecting  3/51 collectors",
		"  ip-10-0-1-22   validating  waiting for the node's agent",
		"0/3 nodes done, 2 at work, 1 waiting, 0s",
	}
	if strings.Join(scr.lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("screen:\n%s\nwant:\n%s", strings.Join(scr.lines, "\n"), strings.Join(want, "\n"))
	}
	b.Finish("ip-10-0-1-22", "failed", "no nodemend-agent answered", true)
	b.Update("ip-10-0-1-333", "downloading", "1.0 MiB / 4.0 MiB")
	clk.advance(3 * time.Second)
	settle()
	b.Finish("ip-10-0-1-1", "saved", "./ip-10-0-1-1-logs.tar.gz (4.0 MiB)", false)
	b.Finish("ip-10-0-1-333", "saved", "./ip-10-0-1-333-logs.tar.gz (4.0 MiB)", false)
	b.Close()
	scr.feed(t, out.take())
	want = []string{
		"✖ ip-10-0-1-22   failed      no nodemend-agent answered",
		"✔ ip-10-0-1-1    saved       ./ip-10-0-1-1-logs.tar.gz (4.0 MiB)",
		"✔ ip-10-0-1-333  saved       ./ip-10-0-1-333-logs.tar.gz (4.0 MiB)",
		"3/3 nodes done (1 failed), 3s",
	}
	if strings.Join(scr.lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("final screen:\n%s\nwant:\n%s", strings.Join(scr.lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestLiveManyItems: more items at work than the terminal has lines: the
// block stays within the screen (a taller block would scroll and break
// the redraw), and lines are cut to the width.
func TestLiveManyItems(t *testing.T) {
	var out syncBuffer
	var nodes []string
	for i := range 300 {
		nodes = append(nodes, fmt.Sprintf("node-%03d", i))
	}
	b := New(&out, nodes, Options{Live: true, Every: time.Millisecond, Size: func() (int, int) { return 40, 10 }})
	for _, n := range nodes {
		b.Update(n, "collecting", strings.Repeat("x", 80))
	}
	time.Sleep(20 * time.Millisecond)
	var scr screen
	scr.feed(t, out.take())
	if len(scr.lines) > 10 {
		t.Fatalf("%d lines on a 10-line terminal", len(scr.lines))
	}
	for _, l := range scr.lines {
		if n := len([]rune(l)); n > 40 {
			t.Fatalf("%d columns on a 40-column terminal: %q", n, l)
		}
	}
	if !strings.Contains(strings.Join(scr.lines, "\n"), "… and 293 more at work") {
		t.Fatalf("screen:\n%s", strings.Join(scr.lines, "\n"))
	}
	b.Close()
}

// TestPlain: one line per change, no escape sequences, repeats dropped,
// a summary at the end.
func TestPlain(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, []string{"a", "node-b"}, Options{})
	b.Update("a", "collecting", "1/2")
	b.Update("a", "collecting", "1/2")
	b.Update("node-b", "collecting", "1/2")
	b.Finish("a", "saved", "./a-logs.tar.gz", false)
	b.Finish("a", "saved", "again", false)
	b.Finish("node-b", "failed", "timed out", true)
	b.Close()
	want := "a       collecting  1/2\nnode-b  collecting  1/2\na       saved       ./a-logs.tar.gz\nnode-b  failed      timed out\n2/2 nodes done (1 failed), 0s\n"
	if out.String() != want {
		t.Fatalf("got:\n%q\nwant:\n%q", out.String(), want)
	}
}

// TestHostileStrings: an API string cannot move the cursor or clear the
// screen: control sequences are shown escaped, in both modes.
func TestHostileStrings(t *testing.T) {
	for _, live := range []bool{false, true} {
		var out syncBuffer
		b := New(&out, []string{"n\x1b[2Jx"}, Options{Live: live, Every: time.Millisecond})
		b.Update("n\x1b[2Jx", "collecting", "evil \x1b]0;title\x07 \r\u202e")
		b.Finish("n\x1b[2Jx", "failed", "\x1b[1A\x1b[J", true)
		b.Close()
		got := out.take()
		if strings.Contains(got, "\x1b[2J") || strings.Contains(got, "\x1b]0") || strings.Contains(got, "\x1b[1A\x1b[J") || strings.Contains(got, "\u202e") {
			t.Fatalf("live=%v: raw control sequence in %q", live, got)
		}
	}
}

// TestPlainThrottle: in plain mode a phase's changing detail (a long
// capture's counters) prints at most every PlainEvery; a new phase at once.
func TestPlainThrottle(t *testing.T) {
	var out bytes.Buffer
	clk := &clock{}
	b := New(&out, []string{"n"}, Options{Now: clk.now, PlainEvery: 5 * time.Second})
	for i := range 10 {
		b.Tick("n", "capturing", fmt.Sprintf("%d packets", i*100))
		clk.advance(time.Second)
	}
	b.Update("n", "downloading", "1 MiB")
	b.Update("n", "downloading", "retrying")
	b.Finish("n", "saved", "./n.pcap.gz", false)
	b.Close()
	want := "n  capturing   0 packets\nn  capturing   500 packets\nn  downloading 1 MiB\nn  downloading retrying\nn  saved       ./n.pcap.gz\n1/1 node done, 10s\n"
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
