// Package bytecount counts bytes and says how many, for people: the one
// size formatter (kubectl mend's progress and results, the storage monitor's
// messages) and the one counting writer (bundles, capture chunks).
package bytecount

import (
	"fmt"
	"io"
)

// Human formats a size in IEC units as people read it: "512 B", "1.5 KiB",
// "20.0 GiB", one decimal from KiB on.
func Human[N int64 | uint64](n N) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for v := uint64(n) / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Writer counts the bytes written through it to W.
type Writer struct {
	W io.Writer
	// N is the number of bytes W accepted.
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
