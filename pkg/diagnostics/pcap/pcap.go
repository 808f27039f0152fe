// Package pcap records packets into gzip-compressed pcap chunk files and
// hands each chunk over as soon as it is complete. The capture itself is
// behind Capturer (tcpdump writing one pcap stream to a pipe here; an
// AF_PACKET implementation would fit the same interface); the Chunker
// compresses and rotates that stream, and Follow hands complete chunks
// over in order and decides when to stop, the same for any capturer.
//
// Why one gzip file per chunk (.pcap.gz), not a tar.gz of rotated files:
// every chunk is a capture file of its own that Wireshark, tshark, editcap
// and mergecap open without unpacking, that `zcat f.pcap.gz | tcpdump -r -`
// reads, and that can be uploaded the moment it closes; a tar of several
// files opens in no capture tool and is only complete at the end.
package pcap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/internal/command"
)

// Spec is a validated capture request.
type Spec struct {
	Interface string
	Filter    string
	// Dir receives the chunk files (created 0700 by the caller).
	Dir string
	// ChunkBytes is the compressed size at which a chunk is closed.
	ChunkBytes int64
	// MaxChunks ends the capture once that many chunks are complete
	// (Stats().Full); 0 means no limit.
	MaxChunks int
}

// Validate checks what the CRD already checks at admission, again: the
// agent must not trust that every object went through this CRD's schema.
func (s Spec) Validate() error {
	if err := ValidateInterface(s.Interface); err != nil {
		return err
	}
	if err := ValidateFilter(s.Filter); err != nil {
		return err
	}
	if s.ChunkBytes < 1<<20 || s.ChunkBytes > 4<<30 {
		return fmt.Errorf("chunk size %d out of [1Mi, 4Gi]", s.ChunkBytes)
	}
	if s.MaxChunks < 0 {
		return fmt.Errorf("negative chunk limit %d", s.MaxChunks)
	}
	if !filepath.IsAbs(s.Dir) {
		return fmt.Errorf("capture directory %q is not absolute", s.Dir)
	}
	return nil
}

// interfaceName is the CRD's pattern of packetCapture.interface: a Linux
// interface name (at most 15 bytes, IFNAMSIZ) or "any", never an option.
var interfaceName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.:@-]{0,14}$`)

// ValidateInterface checks an interface name as the CRD does.
func ValidateInterface(name string) error {
	if !interfaceName.MatchString(name) {
		return fmt.Errorf("invalid interface name %q: letters, digits and _.:@- only, at most 15, not starting with '-'", name)
	}
	return nil
}

// ValidateFilter checks a capture filter as the CRD does: at most 1024
// printable ASCII characters, not starting with '-' (it is one argument
// after "--" anyway; tcpdump itself judges the pcap-filter syntax).
func ValidateFilter(f string) error {
	if len(f) > 1024 || strings.HasPrefix(f, "-") {
		return fmt.Errorf("invalid filter: longer than 1024 characters or starts with '-'")
	}
	for _, c := range f {
		if c < ' ' || c > '~' {
			return fmt.Errorf("invalid filter: only printable ASCII is allowed")
		}
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
	// Chunks lists the complete chunk files, in order.
	Chunks() ([]string, error)
	// Done is closed when the capture has ended and its last chunk is
	// complete; Err then says why it ended (nil for a capture stopped by
	// its context or by MaxChunks).
	Done() <-chan struct{}
	Err() error
	// Stats is what was captured so far.
	Stats() Stats
}

// Tcpdump captures with tcpdump, started directly (no shell) with validated
// arguments, writing one pcap stream to a pipe that a Chunker compresses.
type Tcpdump struct {
	Commands command.Runner
}

// TcpdumpArgs are the arguments for spec: numeric output (no DNS lookups
// from the capture), packet-buffered writes (each packet reaches the pipe
// when it is captured), the whole packet (-s 0: 262144 bytes at most),
// the pcap stream on standard output. "-Z root" keeps tcpdump from
// switching to its own user, which an agent image need not have (Debian's
// tcpdump defaults to the user "tcpdump"); writing to an inherited pipe
// needs no privilege either way. The filter is one argument after "--",
// so it can never be read as an option.
func TcpdumpArgs(s Spec) []string {
	args := []string{"-i", s.Interface, "-n", "-U", "-Z", "root", "-s", "0", "-w", "-"}
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
	ctx, stop := context.WithCancel(ctx)
	return StartStream(s, func(stdout io.Writer) error {
		defer stop()
		err := t.Commands.Run(ctx, "tcpdump", TcpdumpArgs(s), stdout)
		if ctx.Err() != nil {
			err = nil // stopped on purpose
		}
		return err
	}, stop), nil
}

// StartStream runs produce, which writes one pcap stream to its writer
// and returns when the capture ends, and compresses that stream into
// chunks. stop must make produce return (the chunk limit was reached, or
// the stream is unusable).
func StartStream(s Spec, produce func(io.Writer) error, stop func()) Capture {
	c := &streamCapture{chunker: &Chunker{Dir: s.Dir, ChunkBytes: s.ChunkBytes, MaxChunks: s.MaxChunks}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		err := c.chunker.Copy(pr)
		if err != nil {
			stop()
		}
		// Unblock the producer whatever happened to the chunks: a
		// producer blocked on a full pipe must see the end too.
		_ = pr.CloseWithError(errStreamClosed)
		_, _ = io.Copy(io.Discard, pr)
		copied <- err
	}()
	go func() {
		perr := produce(pw)
		_ = pw.Close()
		cerr := <-copied
		switch {
		case errors.Is(cerr, ErrFull):
			cerr = nil
		case perr != nil:
			cerr = perr // the capture's own failure explains the stream's
		}
		c.finish(cerr)
	}()
	return c
}

var errStreamClosed = errors.New("the capture stream was closed")

// streamCapture is a capture compressed by a Chunker.
type streamCapture struct {
	chunker *Chunker
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

func (c *streamCapture) finish(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

func (c *streamCapture) Done() <-chan struct{} { return c.done }

func (c *streamCapture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *streamCapture) Chunks() ([]string, error) { return ListChunks(c.chunker.Dir) }

func (c *streamCapture) Stats() Stats { return c.chunker.Stats() }

// Chunk file names: capture-00000.pcap.gz, capture-00001.pcap.gz, ...;
// the chunk being written carries partSuffix.
const (
	chunkPrefix = "capture-"
	chunkSuffix = ".pcap.gz"
	partSuffix  = ".part"
)

// ChunkIndex returns the position of a complete chunk's file name.
func ChunkIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, chunkPrefix)
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, chunkSuffix)
	if !ok || len(digits) < 5 || len(digits) > 9 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, _ := strconv.Atoi(digits)
	return n, ChunkName(n) == name
}

// ListChunks lists the complete chunk files of dir in order.
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

// ChunkName is the file name of complete chunk i.
func ChunkName(i int) string { return fmt.Sprintf("%s%05d%s", chunkPrefix, i, chunkSuffix) }

// Follow hands over each chunk once it is complete, in order, until the
// capture is done. It stops the capture (through stop) once maxChunks
// chunks were handed over, or when more than maxPending complete chunks
// wait for onChunk (uploads that do not keep up must not fill the disk).
// onChunk runs on Follow's goroutine; an error from it stops everything.
// Follow returns when the capture is done and every complete chunk was
// handed over.
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
		listed, err := c.Chunks()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			stopOnce("listing chunks failed")
			return err
		}
		// By index, not position: onChunk may delete what it was given.
		var waiting []string
		for _, path := range listed {
			if i, ok := ChunkIndex(filepath.Base(path)); ok && i >= next {
				waiting = append(waiting, path)
			}
		}
		if !done && len(waiting) > maxPending {
			stopOnce(fmt.Sprintf("uploads do not keep up: %d chunks wait", len(waiting)))
		}
		for _, path := range waiting {
			i, _ := ChunkIndex(filepath.Base(path))
			if i >= maxChunks {
				stopOnce(fmt.Sprintf("all %d upload URLs used", maxChunks))
				_ = os.Remove(path) // chunks past the last URL are not uploaded
				continue
			}
			if i != next {
				break // chunks complete in order: this one's turn has not come
			}
			if err := onChunk(next, path); err != nil {
				stopOnce("a chunk could not be delivered")
				return err
			}
			next++
		}
		if done {
			return c.Err()
		}
	}
}
