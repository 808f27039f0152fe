package config

import (
	"errors"
	"io"
	"testing"
)

// endless is a file that keeps growing while it is read: it never ends,
// and counts what was read of it.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '#'
	}
	e.read += len(p)
	return len(p), nil
}

// "The read itself is limited (a file that grows while it is read)": a
// file whose content is longer than the size it reported is refused, not
// cut at the limit and applied, and is never read further than one byte
// past the limit; one of exactly the limit is read whole.
func TestAFileGrowingWhileItIsReadIsRefused(t *testing.T) {
	grows := &endless{}
	if _, err := readAtMost(grows, "agent.yaml"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file that keeps growing: %v, want ErrTooLarge", err)
	}
	if grows.read > MaxFileBytes+1+64<<10 {
		t.Errorf("read %d bytes of it, the limit is %d", grows.read, MaxFileBytes)
	}
	for _, c := range []struct {
		size int
		ok   bool
	}{{MaxFileBytes - 1, true}, {MaxFileBytes, true}, {MaxFileBytes + 1, false}} {
		data, err := readAtMost(io.LimitReader(&endless{}, int64(c.size)), "agent.yaml")
		if c.ok && (err != nil || len(data) != c.size) {
			t.Errorf("%d bytes: %d read, %v", c.size, len(data), err)
		}
		if !c.ok && !errors.Is(err, ErrTooLarge) {
			t.Errorf("%d bytes: %v, want ErrTooLarge", c.size, err)
		}
	}
}
