package bytecount

import (
	"errors"
	"testing"
)

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{5 << 20, "5.0 MiB"}, {20 << 30, "20.0 GiB"}, {3 << 40, "3.0 TiB"}, {1 << 63, "8.0 EiB"},
	} {
		if got := Human(c.n); got != c.want {
			t.Errorf("Human(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Human(int64(1536)); got != "1.5 KiB" {
		t.Errorf("Human(int64 1536) = %q", got)
	}
}

type short struct{ max int }

func (s short) Write(p []byte) (int, error) {
	if len(p) > s.max {
		return s.max, errors.New("short write")
	}
	return len(p), nil
}

// The count is what the writer below accepted, also on a short write.
func TestWriterCountsAcceptedBytes(t *testing.T) {
	w := &Writer{W: short{max: 3}}
	_, _ = w.Write([]byte("ab"))
	_, _ = w.Write([]byte("cdefg"))
	if w.N != 5 {
		t.Errorf("N = %d, want 5 (2 + the 3 accepted)", w.N)
	}
}
