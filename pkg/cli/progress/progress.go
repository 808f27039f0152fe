// Package progress shows the progress of work on many items (nodes) at
// once. On a terminal it keeps one live block at the bottom, redrawn in
// place at most ten times a second: a line per item still at work and a
// summary line; an item that finishes leaves a permanent line above the
// block, so a run over hundreds of nodes scrolls like a log and never
// loses what finished. Elsewhere (a pipe, a file, CI logs) it degrades to
// one plain line per change, which redrawing would only garble. Every
// string is shown through termsafe: details quote the API.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"nodemend.dev/nodemend/pkg/cli/termsafe"
)

// Options configure a Board.
type Options struct {
	// Live redraws a block in place (a terminal); otherwise plain lines.
	Live bool
	// Size returns the terminal's width and height; nil means 100x24.
	Size func() (width, height int)
	// Every is the live redraw interval (default 100ms).
	Every time.Duration
	// Now is the clock for elapsed times (default time.Now).
	Now func() time.Time
	// Noun names the items in the summary ("node" by default).
	Noun string
	// PlainEvery is how often, in plain mode, a line is printed for an
	// item whose phase did not change (default 5s): a long capture or
	// download would otherwise print a line a second.
	PlainEvery time.Duration
}

type item struct {
	name, phase, detail string
	started, finished   bool
	failed              bool
	printed             time.Time // plain mode: when its last line was printed
}

// Board is the progress of a set of items.
type Board struct {
	mu      sync.Mutex
	w       io.Writer
	opts    Options
	width   int // widest item name
	items   []*item
	byName  map[string]*item
	printed []string // finished lines not yet printed (live)
	drawn   int      // lines of the live block on screen
	dirty   bool
	shown   string // the summary line on screen
	start   time.Time
	stop    chan struct{}
	stopped chan struct{}
	closed  bool
}

// New shows progress for items on w.
func New(w io.Writer, items []string, opts Options) *Board {
	if opts.Size == nil {
		opts.Size = func() (int, int) { return 100, 24 }
	}
	if opts.Every <= 0 {
		opts.Every = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Noun == "" {
		opts.Noun = "node"
	}
	if opts.PlainEvery <= 0 {
		opts.PlainEvery = 5 * time.Second
	}
	b := &Board{w: w, opts: opts, byName: map[string]*item{}, start: opts.Now()}
	for _, name := range items {
		safe := termsafe.String(name)
		it := &item{name: safe}
		b.items = append(b.items, it)
		b.byName[name] = it
		b.width = max(b.width, utf8.RuneCountInString(safe))
	}
	if opts.Live {
		b.stop, b.stopped = make(chan struct{}), make(chan struct{})
		go b.loop()
	}
	return b
}

func (b *Board) get(name string) *item {
	it := b.byName[name]
	if it == nil {
		safe := termsafe.String(name)
		it = &item{name: safe}
		b.items = append(b.items, it)
		b.byName[name] = it
		b.width = max(b.width, utf8.RuneCountInString(safe))
	}
	return it
}

// Update reports an item's phase ("validating", "collecting", ...) and a
// detail; in plain mode a repeated identical update prints nothing.
func (b *Board) Update(name, phase, detail string) { b.update(name, phase, detail, false) }

// Tick is Update for counters that change all the time (packets so far,
// bytes downloaded): in plain mode, one of the same phase prints at most
// every PlainEvery.
func (b *Board) Tick(name, phase, detail string) { b.update(name, phase, detail, true) }

func (b *Board) update(name, phase, detail string, tick bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	it := b.get(name)
	phase, detail = termsafe.String(phase), termsafe.String(detail)
	if it.finished || (it.started && it.phase == phase && it.detail == detail) {
		return
	}
	samePhase := it.started && it.phase == phase
	it.started, it.phase, it.detail = true, phase, detail
	if b.opts.Live {
		b.dirty = true
		return
	}
	if now := b.opts.Now(); !tick || !samePhase || now.Sub(it.printed) >= b.opts.PlainEvery {
		it.printed = now
		fmt.Fprintln(b.w, b.line(it))
	}
}

// Finish reports an item's outcome: its last phase ("saved", "failed")
// and detail, once.
func (b *Board) Finish(name, phase, detail string, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	it := b.get(name)
	if it.finished {
		return
	}
	it.started, it.finished, it.failed = true, true, failed
	it.phase, it.detail = termsafe.String(phase), termsafe.String(detail)
	if b.opts.Live {
		mark := "✔"
		if failed {
			mark = "✖"
		}
		b.printed = append(b.printed, mark+" "+b.line(it))
		b.dirty = true
		return
	}
	fmt.Fprintln(b.w, b.line(it))
}

// Close draws the last state and the summary; the Board shows nothing
// after it.
func (b *Board) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	if b.opts.Live {
		close(b.stop)
		<-b.stopped
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.Live {
		b.redraw(true)
		return
	}
	fmt.Fprintln(b.w, b.summary())
}

func (b *Board) loop() {
	defer close(b.stopped)
	t := time.NewTicker(b.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.mu.Lock()
		if b.dirty || b.summary() != b.shown {
			b.redraw(false)
		}
		b.mu.Unlock()
	}
}

// redraw replaces the live block: up to its first line, erase to the end
// of the screen, the newly finished lines, then the block again (the
// summary alone once final).
func (b *Board) redraw(final bool) {
	width, height := b.opts.Size()
	width = max(width, 20)
	var out strings.Builder
	if b.drawn > 0 {
		fmt.Fprintf(&out, "\r\x1b[%dA\x1b[J", b.drawn)
	} else {
		out.WriteString("\r\x1b[J")
	}
	for _, l := range b.printed {
		out.WriteString(fit(l, width) + "\n")
	}
	b.printed = nil
	var block []string
	if !final {
		var running []*item
		for _, it := range b.items {
			if it.started && !it.finished {
				running = append(running, it)
			}
		}
		room := max(height-2, 1)
		for i, it := range running {
			if i == room-1 && len(running) > room {
				block = append(block, fmt.Sprintf("  … and %d more at work", len(running)-i))
				break
			}
			block = append(block, "  "+b.line(it))
		}
	}
	b.shown = b.summary()
	block = append(block, b.shown)
	for _, l := range block {
		out.WriteString(fit(l, width) + "\n")
	}
	b.drawn = len(block)
	if final {
		b.drawn = 0
	}
	b.dirty = false
	_, _ = io.WriteString(b.w, out.String())
}

func (b *Board) line(it *item) string {
	pad := b.width - utf8.RuneCountInString(it.name)
	return fmt.Sprintf("%s%s  %-11s %s", it.name, strings.Repeat(" ", max(pad, 0)), it.phase, it.detail)
}

// summary counts the items: "3/10 nodes done (1 failed), 6 at work, 1 waiting, 12s".
func (b *Board) summary() string {
	done, failed, running, waiting := 0, 0, 0, 0
	for _, it := range b.items {
		switch {
		case it.finished:
			done++
			if it.failed {
				failed++
			}
		case it.started:
			running++
		default:
			waiting++
		}
	}
	noun := b.opts.Noun
	if len(b.items) != 1 {
		noun += "s"
	}
	s := fmt.Sprintf("%d/%d %s done", done, len(b.items), noun)
	if failed > 0 {
		s += fmt.Sprintf(" (%d failed)", failed)
	}
	if running > 0 {
		s += fmt.Sprintf(", %d at work", running)
	}
	if waiting > 0 {
		s += fmt.Sprintf(", %d waiting", waiting)
	}
	return s + ", " + b.opts.Now().Sub(b.start).Round(time.Second).String()
}

// fit cuts a line to the terminal's width: a wrapped line would move the
// cursor arithmetic of the next redraw.
func fit(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}
