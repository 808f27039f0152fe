package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	yaml3 "go.yaml.in/yaml/v3"
)

// Limits on a config file. An agent config is a few hundred values; these
// bound what a hostile or broken file can cost the agent (which runs on
// every node next to the workload) before it is refused. A YAML parser
// builds a tree of 100–250 bytes per value, so a dense 1 MiB file would
// cost over 100 MiB to parse: the structure is counted before anything is
// parsed (docs/agent-config.md).
const (
	// MaxFileBytes is the largest config file read, the size limit of a
	// ConfigMap.
	MaxFileBytes = 1 << 20
	// MaxStructure bounds the bytes that can start a YAML value (line
	// breaks and , : - ? [ {), counted before parsing: a file has at most
	// twice as many values as it has of these.
	MaxStructure = 10_000
	// MaxValues bounds the values (keys, scalars, lists, maps) of the file
	// with every alias expanded where it is used.
	MaxValues = 10_000
	// MaxDepth bounds the nesting of lists and maps.
	MaxDepth = 32
	// MaxScalarBytes bounds one string (a path, a pattern, a duration).
	MaxScalarBytes = 16 << 10
)

// ErrTooLarge marks a file over MaxFileBytes.
var ErrTooLarge = errors.New("agent config file too large")

// ReadFile reads a config file of at most MaxFileBytes. A larger file is
// refused from its size without being read, and the read itself is
// limited (a file that grows while it is read, or one whose size the
// filesystem does not report). Only regular files are read: a FIFO or a
// device would block the reader or never end.
func ReadFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("agent config %s is not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the limit of %d (1 MiB)", ErrTooLarge, path, st.Size(), MaxFileBytes)
	}
	return readAtMost(f, path)
}

// readAtMost reads r to its end, refusing it once it has more than
// MaxFileBytes: what a file's size said is not what its read gives when it
// grows meanwhile, so the read is bounded by itself. It reads one byte past
// the limit, to tell a file of exactly the limit from a longer one.
func readAtMost(r io.Reader, path string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s has more than %d bytes (1 MiB)", ErrTooLarge, path, MaxFileBytes)
	}
	return data, nil
}

// checkStructure refuses a document whose shape no agent config has, at a
// cost that does not grow with what the document would expand to: first a
// count of the bytes that can start a value (no allocation), then, on a
// document that passed it (at most 2×MaxStructure values), a walk of its
// node tree that counts values with aliases expanded, nesting and string
// sizes.
func checkStructure(data []byte) error {
	if len(data) > MaxFileBytes {
		return fmt.Errorf("%w: %d bytes, more than the limit of %d (1 MiB)", ErrTooLarge, len(data), MaxFileBytes)
	}
	if n := structureBytes(data); n > MaxStructure {
		return fmt.Errorf("more YAML structure than an agent config has: %d line breaks and , : - ? [ { characters, at most %d", n, MaxStructure)
	}
	var doc yaml3.Node
	if err := yaml3.Unmarshal(data, &doc); err != nil {
		return err
	}
	w := walker{sizes: map[*yaml3.Node]int{}, active: map[*yaml3.Node]bool{}}
	n, err := w.size(&doc, 0)
	if err != nil {
		return err
	}
	if n > MaxValues {
		return fmt.Errorf("the file expands to %d values (aliases expanded), at most %d", n, MaxValues)
	}
	return nil
}

// structureBytes counts the bytes after which a YAML value can start. Every
// value but the document's first follows one of them (a block entry or key
// at a line start, after "- ", ": " or "? ", a flow entry after [ { or ,),
// and each can start at most two (a flow mapping key and its implied null),
// so a document has at most 2×(n+1) values. Occurrences inside strings and
// comments are counted too: the count is an upper bound, never less.
func structureBytes(data []byte) int {
	n := 0
	for _, b := range data {
		switch b {
		case '\n', '\r', ',', ':', '-', '?', '[', '{':
			n++
		}
	}
	return n
}

// walker sizes a node tree with aliases expanded, each anchored node sized
// once (a billion laughs costs its tree, not its expansion).
type walker struct {
	sizes  map[*yaml3.Node]int
	active map[*yaml3.Node]bool // nodes being sized: an alias to one is a cycle
}

func (w *walker) size(n *yaml3.Node, depth int) (int, error) {
	if depth > MaxDepth {
		return 0, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, MaxDepth)
	}
	anchored := n.Anchor != "" // only an anchored node can be an alias's target
	if anchored {
		if s, ok := w.sizes[n]; ok {
			return s, nil
		}
		if w.active[n] {
			return 0, fmt.Errorf("line %d: an alias refers to a value that contains it", n.Line)
		}
		w.active[n] = true
		defer delete(w.active, n)
	}
	total := 1
	switch n.Kind {
	case yaml3.AliasNode:
		s, err := w.size(n.Alias, depth)
		if err != nil {
			return 0, err
		}
		total = s
	case yaml3.ScalarNode:
		if len(n.Value) > MaxScalarBytes {
			return 0, fmt.Errorf("line %d: a value of %d bytes, at most %d", n.Line, len(n.Value), MaxScalarBytes)
		}
	default:
		inner := depth + 1
		if n.Kind == yaml3.DocumentNode {
			inner = depth
		}
		for _, c := range n.Content {
			s, err := w.size(c, inner)
			if err != nil {
				return 0, err
			}
			total += s
			if total > MaxValues {
				return 0, fmt.Errorf("line %d: the file expands to more than %d values (aliases expanded)", n.Line, MaxValues)
			}
		}
	}
	if anchored {
		w.sizes[n] = total
	}
	return total, nil
}
