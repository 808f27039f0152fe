package dcgm

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"nodemend.dev/nodemend/pkg/monitor"
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
	// Dcgmi is the dcgmi tool in the agent's own filesystem: a name looked
	// up in PATH, or an absolute path. It needs DCGM's libraries beside it
	// (the datacenter-gpu-manager package, or an image that ships it).
	Dcgmi string `json:"dcgmi,omitempty"`
	// HostEngine is the nv-hostengine dcgmi connects to (its --host):
	// host, host:port, or unix:///path for a socket. Empty means
	// localhost:5555, where the GPU operator's and the DCGM packages'
	// host engines listen.
	HostEngine string `json:"hostEngine,omitempty"`
	// CheckInterval is the period of the health watch and field checks.
	CheckInterval monitor.Duration `json:"checkInterval,omitempty"`
}

// DefaultConfig is the section used when the file leaves keys out.
func DefaultConfig() Config {
	return Config{Mode: Auto, Dcgmi: "dcgmi", CheckInterval: monitor.Duration{Duration: time.Minute}}
}

// Validate checks the section.
func (c Config) Validate(path string) []error {
	errs := monitor.Errors(monitor.MinPeriod(path+".checkInterval", c.CheckInterval))
	if !c.Mode.Valid() {
		errs = append(errs, fmt.Errorf("%s.mode: %q is not auto, required or off", path, c.Mode))
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
		} else if strings.HasPrefix(h, "-") || !monitor.HostPort(h, false) {
			errs = append(errs, fmt.Errorf("%s.hostEngine: %q is not host, host:port or unix:///path", path, h))
		}
	}
	return errs
}
