package storage

import (
	"fmt"
	"path/filepath"

	"nodemend.dev/nodemend/pkg/detection"
)

// Config configures the storage monitor (StorageReady).
type Config struct {
	detection.Switch `json:",inline"`
	// CheckInterval is the period of every storage check.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
	// Filesystems are the host paths whose filesystems the node depends on:
	// they must not turn read-only, shut down or fill up.
	Filesystems []string `json:"filesystems,omitempty"`
	// ProbeDir is the directory, owned by the agent, where the write probe
	// writes and fsyncs a tiny file.
	ProbeDir string `json:"probeDir,omitempty"`
	// ProbeTimeout bounds the write probe and every statfs and NVMe ioctl.
	ProbeTimeout detection.Duration `json:"probeTimeout,omitempty"`
	// XFSInterval is the period of the XFS free space check: long, because
	// free space fragmentation builds up over days and each check reads
	// every XFS filesystem's free space btrees.
	XFSInterval detection.Duration `json:"xfsInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out. Only an
// absent filesystems list takes the default: "filesystems: []" watches none.
func DefaultConfig() Config {
	return Config{Switch: detection.Enabled(), CheckInterval: detection.Seconds(30), ProbeTimeout: detection.Seconds(10),
		XFSInterval: detection.Seconds(600), Filesystems: DefaultFilesystems(), ProbeDir: "/var/lib/nodemend/probe"}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	errs := detection.Errors(
		detection.MinPeriod(path+".checkInterval", c.CheckInterval),
		detection.MinPeriod(path+".probeTimeout", c.ProbeTimeout),
		detection.MinPeriod(path+".xfsInterval", c.XFSInterval),
		detection.NotLonger(path+".probeTimeout", c.ProbeTimeout, c.CheckInterval),
	)
	for i, p := range c.Filesystems {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s.filesystems[%d]: %q must be an absolute path (it is read under the host root)", path, i, p))
		}
	}
	if !filepath.IsAbs(c.ProbeDir) || filepath.Clean(c.ProbeDir) == "/" {
		errs = append(errs, fmt.Errorf("%s.probeDir: %q must be an absolute path of a directory the agent owns, not /", path, c.ProbeDir))
	}
	return errs
}

// Options are the monitor's options for the section.
func (c Config) Options() Options {
	return Options{
		Period:       c.CheckInterval.Duration,
		Filesystems:  c.Filesystems,
		ProbeDir:     c.ProbeDir,
		ProbeTimeout: c.ProbeTimeout.Duration,
		XFSPeriod:    c.XFSInterval.Duration,
	}
}
