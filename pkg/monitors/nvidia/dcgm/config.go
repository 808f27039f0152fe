package dcgm

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/detection"
)

// Config configures the nvidia monitor's DCGM source
// (docs/accelerators.md, "DCGM"): health watches read through the dcgmi
// tool, and the GPU diagnostics a NodeDiagnostic asks for. DCGM is never
// required: a node without a host engine writes nothing for it.
type Config struct {
	// Mode is auto (use DCGM when a host engine answers; DCGMError only when
	// one that answered stops), required (no host engine at all is
	// DCGMError) or off (never run dcgmi).
	Mode Mode `json:"mode,omitempty"`
	// Dcgmi is the dcgmi tool: a name looked up in PATH, or an absolute
	// path, in the filesystem dcgmiFrom picks.
	Dcgmi string `json:"dcgmi,omitempty"`
	// DcgmiFrom says whose dcgmi runs: auto (the agent's own, else the
	// host's), agent, or host. The agent's needs DCGM's libraries beside it
	// (an agent image that ships the datacenter-gpu-manager package). The
	// host's (DCGM's packages on the node) is looked up under the host root
	// and run inside it (chroot), with the host's libraries. Either runs
	// only when it and what it loads (loader, libraries, the directories on
	// the way) are root's alone; else nothing runs.
	DcgmiFrom ToolFrom `json:"dcgmiFrom,omitempty"`
	// HostEngine is the nv-hostengine dcgmi connects to (its --host):
	// host, host:port, or unix:///path for a socket, a path in the
	// filesystem of the dcgmi that runs. Empty means localhost:5555, where
	// the GPU operator's and the DCGM packages' host engines listen (the
	// agent shares the node's network).
	HostEngine string `json:"hostEngine,omitempty"`
	// CheckInterval is the period of the health watch and field checks.
	CheckInterval detection.Duration `json:"checkInterval,omitempty"`
}

// ToolFrom says whose filesystem dcgmi comes from.
type ToolFrom string

const (
	// FromAuto runs the agent's dcgmi, else the host's.
	FromAuto ToolFrom = "auto"
	// FromAgent runs only the agent's.
	FromAgent ToolFrom = "agent"
	// FromHost runs only the host's.
	FromHost ToolFrom = "host"
)

// Valid reports whether f is a known source.
func (f ToolFrom) Valid() bool { return f == FromAuto || f == FromAgent || f == FromHost }

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Mode: Auto, Dcgmi: "dcgmi", DcgmiFrom: FromAuto, CheckInterval: detection.Duration{Duration: time.Minute}}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	errs := detection.Errors(detection.MinPeriod(path+".checkInterval", c.CheckInterval))
	if !c.Mode.Valid() {
		errs = append(errs, fmt.Errorf("%s.mode: %q is not auto, required or off", path, c.Mode))
	}
	if !c.DcgmiFrom.Valid() {
		errs = append(errs, fmt.Errorf("%s.dcgmiFrom: %q is not auto, agent or host", path, c.DcgmiFrom))
	}
	// Both end up as arguments of a command: an option-like value would be
	// read as another option.
	if strings.HasPrefix(c.Dcgmi, "-") || strings.ContainsAny(c.Dcgmi, " \t\n") ||
		(strings.Contains(c.Dcgmi, "/") && !filepath.IsAbs(c.Dcgmi)) {
		errs = append(errs, fmt.Errorf("%s.dcgmi: %q must be a command name or an absolute path", path, c.Dcgmi))
	}
	if h := c.HostEngine; h != "" {
		if strings.HasPrefix(h, "unix://") {
			if !filepath.IsAbs(strings.TrimPrefix(h, "unix://")) {
				errs = append(errs, fmt.Errorf("%s.hostEngine: %q must be unix:// followed by an absolute socket path", path, h))
			}
		} else if strings.HasPrefix(h, "-") || !detection.HostPort(h, false) {
			errs = append(errs, fmt.Errorf("%s.hostEngine: %q is not host, host:port or unix:///path", path, h))
		}
	}
	return errs
}
