package bundle

import "time"

// ManifestVersion changes when the manifest's meaning changes.
const ManifestVersion = 1

// Manifest describes a bundle: what was asked, what every collector did, and
// what was cut or redacted. It is the last entry of the archive.
type Manifest struct {
	Version        int       `json:"version"`
	Node           string    `json:"node"`
	NodeDiagnostic string    `json:"nodeDiagnostic,omitempty"`
	Generation     int64     `json:"generation,omitempty"`
	Categories     []string  `json:"categories"`
	Since          time.Time `json:"since"`
	Started        time.Time `json:"started"`
	Finished       time.Time `json:"finished"`
	// MaxBytes is the size cap; Truncated is set when it was reached.
	MaxBytes   int64             `json:"maxBytes,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
	Redactions int               `json:"redactions"`
	Collectors []CollectorResult `json:"collectors"`
}

// CollectorResult is what one collector did.
type CollectorResult struct {
	Name     string    `json:"name"`
	Category string    `json:"category"`
	Started  time.Time `json:"started"`
	Duration Duration  `json:"duration"`
	// Error is set when the collector failed or timed out; its files are
	// still in the bundle when it wrote any before failing.
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	// Skipped says why a collector did not apply (a tool not installed, no
	// such device), which is not an error.
	Skipped string      `json:"skipped,omitempty"`
	Files   []FileEntry `json:"files,omitempty"`
}

// FileEntry is one file of the bundle.
type FileEntry struct {
	Path       string `json:"path"`
	Bytes      int64  `json:"bytes"`
	Redactions int    `json:"redactions,omitempty"`
	// Source is the host path a file was copied from.
	Source string `json:"source,omitempty"`
	// Note says how the content was cut: "last 32 MiB of 120 MiB", "per-file
	// limit", "bundle size cap", "left out: bundle size cap".
	Note string `json:"note,omitempty"`
}

// Duration marshals as a Go duration string ("1.5s").
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
