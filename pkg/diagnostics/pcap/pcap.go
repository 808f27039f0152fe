// Package pcap records packets into chunk files and hands each chunk over as
// soon as it is closed. The capture itself is behind Capturer (tcpdump here;
// an AF_PACKET implementation would fit the same interface); the chunk
// logic (which file is complete, in which order, when to stop) is the same
// for any of them and is tested with scripted captures.
package pcap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/pkg/diagnostics/command"
)

// Spec is a validated capture request.
type Spec struct {
	Interface string
	Filter    string
	// Dir receives the chunk files (created 0700 by the caller).
	Dir string
	// ChunkBytes is the size at which a chunk is closed.
	ChunkBytes int64
}

// Validate checks what the CRD already checks at admission, again: the
// agent must not trust that every object went through this CRD's schema.
func (s Spec) Validate() error {
	if !regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.:@-]{0,14}$`).MatchString(s.Interface) {
		return fmt.Errorf("invalid interface name %q", s.Interface)
	}
	if len(s.Filter) > 1024 || strings.HasPrefix(s.Filter, "-") {
		return fmt.Errorf("invalid filter: too long or starts with '-'")
	}
	for _, c := range s.Filter {
		if c < ' ' || c > '~' {
			return fmt.Errorf("invalid filter: only printable ASCII is allowed")
		}
	}
	if s.ChunkBytes < 1<<20 || s.ChunkBytes > 1<<30 {
		return fmt.Errorf("chunk size %d out of [1Mi, 1Gi]", s.ChunkBytes)
	}
	if !filepath.IsAbs(s.Dir) {
		return fmt.Errorf("capture directory %q is not absolute", s.Dir)
	}
	return nil
}

// Capturer starts captures.
type Capturer interface {
	// Start begins recording into spec.Dir. The capture stops when ctx is
	// done (the caller bounds its duration) or on its own error.
	Start(ctx context.Context, spec Spec) (Capture, error)
}

// Capture is a running capture.
type Capture interface {
	// Chunks lists the chunk files written so far, in order. The last one
	// may still be written to while Done is open.
	Chunks() ([]string, error)
	// Done is closed when the capture has ended; Err then says why (nil for
	// a capture stopped by its context).
	Done() <-chan struct{}
	Err() error
}

// Tcpdump captures with tcpdump, started directly (no shell) with validated
// arguments.
type Tcpdump struct {
	Commands command.Runner
}

// chunkBase is the name tcpdump is given; it appends 1, 2, ... to the next
// chunks (-C).
const chunkBase = "capture.pcap"

// TcpdumpArgs are the arguments for spec: numeric output (no DNS lookups
// from the capture), packet-buffered writes so that closed chunks are
// complete, root kept (the output directory is root's), rotation at the
// chunk size (tcpdump counts in units of 1,000,000 bytes). The filter is
// one argument after "--", so it can never be read as an option.
func TcpdumpArgs(s Spec) []string {
	mb := (s.ChunkBytes + 999_999) / 1_000_000
	args := []string{"-i", s.Interface, "-n", "-U", "-Z", "root", "-s", "0", "-C", strconv.FormatInt(mb, 10),
		"-w", filepath.Join(s.Dir, chunkBase)}
	if s.Filter != "" {
		args = append(args, "--", s.Filter)
	}
	return args
}

// Start implements Capturer.
func (t *Tcpdump) Start(ctx context.Context, s Spec) (Capture, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if _, err := t.Commands.LookPath("tcpdump"); err != nil {
		return nil, fmt.Errorf("tcpdump is not installed on this node's agent: %w", err)
	}
	c := &dirCapture{dir: s.Dir, done: make(chan struct{})}
	go func() {
		var stdout strings.Builder
		err := t.Commands.Run(ctx, "tcpdump", TcpdumpArgs(s), &limited{&stdout, 4096})
		if ctx.Err() != nil {
			err = nil // stopped on purpose
		}
		c.finish(err)
	}()
	return c, nil
}

// dirCapture lists tcpdump's chunk files.
type dirCapture struct {
	dir  string
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func (c *dirCapture) finish(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

func (c *dirCapture) Done() <-chan struct{} { return c.done }

func (c *dirCapture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *dirCapture) Chunks() ([]string, error) { return ListChunks(c.dir) }

// ChunkIndex returns the position of a tcpdump chunk file name:
// "capture.pcap" 0, "capture.pcap1" 1, ...
func ChunkIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, chunkBase)
	if !ok {
		return 0, false
	}
	if rest == "" {
		return 0, true
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// ListChunks lists the chunk files of dir in order.
func ListChunks(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type chunk struct {
		i    int
		path string
	}
	var cs []chunk
	for _, e := range entries {
		if i, ok := ChunkIndex(e.Name()); ok && e.Type().IsRegular() {
			cs = append(cs, chunk{i, filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(cs, func(a, b int) bool { return cs[a].i < cs[b].i })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.path
	}
	return out, nil
}

// ChunkName is the file name of chunk i (for scripted captures).
func ChunkName(i int) string {
	if i == 0 {
		return chunkBase
	}
	return chunkBase + strconv.Itoa(i)
}

type limited struct {
	b *strings.Builder
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Follow hands over each chunk once it is complete: chunk i is complete when
// chunk i+1 exists, and the last one when the capture is done. It stops the
// capture (through stop) once maxChunks chunks were handed over, or when
// more than maxPending complete chunks wait for onChunk (uploads that do not
// keep up must not fill the disk). onChunk runs on Follow's goroutine, in
// order; an error from it stops everything. Follow returns when the capture
// is done and every complete chunk was handed over.
func Follow(ctx context.Context, c Capture, clk clock.Clock, poll time.Duration, maxChunks, maxPending int, stop func(reason string),
	onChunk func(i int, path string) error) error {
	next := 0
	stopped := false
	stopOnce := func(reason string) {
		if !stopped {
			stopped = true
			stop(reason)
		}
	}
	for {
		done := false
		select {
		case <-c.Done():
			done = true
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(poll):
		}
		chunks, err := c.Chunks()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			stopOnce("listing chunks failed")
			return err
		}
		complete := len(chunks)
		if !done && complete > 0 {
			complete-- // the newest is still being written
		}
		if !done && complete-next > maxPending {
			stopOnce(fmt.Sprintf("uploads do not keep up: %d chunks wait", complete-next))
		}
		for next < complete {
			if next >= maxChunks {
				stopOnce(fmt.Sprintf("all %d upload URLs used", maxChunks))
				// Chunks past the last URL are not uploaded.
				for _, extra := range chunks[next:] {
					_ = os.Remove(extra)
				}
				break
			}
			if err := onChunk(next, chunks[next]); err != nil {
				stopOnce("a chunk could not be delivered")
				return err
			}
			next++
		}
		if !done && len(chunks) > maxChunks {
			stopOnce(fmt.Sprintf("all %d upload URLs used", maxChunks))
		}
		if done {
			return c.Err()
		}
	}
}
