package journal

import "nodemend.dev/nodemend/pkg/logline"

// ParseEntry is parseEntry without the cursor, for tests that need only the
// line.
func ParseEntry(b []byte) (logline.Line, error) {
	l, _, err := parseEntry(b)
	return l, err
}
