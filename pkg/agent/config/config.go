// Package config is the agent's configuration file: strict YAML, validated
// against the reason registry, with defaults that match the documentation
// (docs/agent-config.md).
package config

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"sigs.k8s.io/yaml"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// Config is the whole agent config file.
type Config struct {
	Monitors Monitors `json:"monitors"`
	// Reasons overrides reasons, keyed by reason code or by family name
	// (NvidiaXIDError, NvidiaXIDWarning: every member; docs/reasons.md). A
	// reason's own entry takes precedence over its family's, field by field.
	Reasons  map[string]ReasonConfig `json:"reasons,omitempty"`
	Sources  Sources                 `json:"sources"`
	Exporter ExporterConfig          `json:"exporter"`
	// CustomRules are the operator's own log rules: reasons named
	// Custom..., each reading one source and believing the writers it
	// names (docs/agent-config.md, custom rules and checks).
	CustomRules []CustomRule `json:"customRules,omitempty"`
	// CustomChecks are the operator's own checks: host programs run on a
	// period, in node-problem-detector's plugin protocol.
	CustomChecks []CustomCheck `json:"customChecks,omitempty"`
}

// ReasonConfig overrides one reason.
type ReasonConfig struct {
	// Disabled drops every detection of the reason.
	Disabled bool `json:"disabled,omitempty"`
	// Severity lowers the reason's severity (Fatal → Warning → Info); raising
	// it is refused, so config can never make a node repairable on its own.
	Severity string `json:"severity,omitempty"`
	// Threshold replaces the reason's default threshold (in the registry's unit).
	Threshold *float64 `json:"threshold,omitempty"`
	// QuietPeriod replaces the recovery quiet period of a Fatal log-derived
	// reason: at least 1m. Keep it longer than the repair toleration of its
	// condition, or a flapping fault may never be repaired.
	QuietPeriod *detection.Duration `json:"quietPeriod,omitempty"`
	// Promote makes a Warning reason Fatal, as a reason of the operator's,
	// when it repeats (custom.go).
	Promote *Promotion `json:"promote,omitempty"`
}

// MinQuietPeriod is the shortest quiet period a reason may be given
// (health.MinQuietPeriod, where the controller reads it too).
const MinQuietPeriod = health.MinQuietPeriod

// Sources configures the log sources.
type Sources struct {
	Kmsg    KmsgSource    `json:"kmsg"`
	Journal JournalSource `json:"journal"`
}

// KmsgSource configures the kernel log reader.
type KmsgSource struct {
	// Enabled reads the kernel log (<host-root>/dev/kmsg).
	Enabled *bool `json:"enabled,omitempty"`
	// Lookback replays records of the kernel ring buffer this recent at start.
	Lookback detection.Duration `json:"lookback,omitempty"`
}

// JournalSource configures the systemd journal reader.
type JournalSource struct {
	// Mode is journalctl (follow the host journal), file (tail a JSON-lines
	// export, for tests and the simulation) or off.
	Mode string `json:"mode,omitempty"`
	// Directory is the journal directory under the host root (journalctl mode).
	Directory string `json:"directory,omitempty"`
	// File is the JSON-lines file under the host root (file mode).
	File string `json:"file,omitempty"`
	// Command is the journalctl binary.
	Command string `json:"command,omitempty"`
}

// ExporterConfig tunes status writes.
type ExporterConfig struct {
	// Heartbeat rewrites the conditions this often without change.
	Heartbeat detection.Duration `json:"heartbeat,omitempty"`
	// Coalesce waits this long after a change for others before writing.
	Coalesce detection.Duration `json:"coalesce,omitempty"`
}

// Journal modes.
const (
	JournalCtl  = "journalctl"
	JournalFile = "file"
	JournalOff  = "off"
)

// Default returns the configuration used when no file is given; every field
// that Parse leaves empty takes these values.
func Default() Config {
	on := true
	return Config{
		Monitors: defaultMonitors(),
		Sources: Sources{
			Kmsg:    KmsgSource{Enabled: &on, Lookback: detection.Duration{Duration: 10 * time.Minute}},
			Journal: JournalSource{Mode: JournalCtl, Directory: "/var/log/journal", File: "/var/log/nodemend/journal.jsonl", Command: "journalctl"},
		},
		Exporter: ExporterConfig{Heartbeat: detection.Duration{Duration: v1alpha1.DefaultAgentHeartbeat}, Coalesce: detection.Duration{Duration: 5 * time.Millisecond}},
	}
}

// Parse strictly decodes a config file (unknown keys are errors), fills in
// defaults and validates it. A document beyond the limits (limits.go) is
// refused before it is decoded.
func Parse(data []byte) (Config, error) {
	// Before the decoder, which would build (and expand) whatever it is given.
	if err := checkStructure(data); err != nil {
		return Config{}, fmt.Errorf("invalid agent config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("invalid agent config: %w", err)
	}
	c.fillDefaults(Default())
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid agent config: %w", err)
	}
	return c, nil
}

func (c *Config) fillDefaults(d Config) {
	c.Monitors.fillDefaults()
	detection.FillDefaults(&c.Sources, d.Sources)
	detection.FillDefaults(&c.Exporter, d.Exporter)
}

// Validate checks the config against the registry.
func (c Config) Validate() error {
	var errs []error
	names := make([]string, 0, len(c.Reasons))
	for n := range c.Reasons {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		errs = append(errs, validateReasonOverride(name, c.Reasons[name])...)
	}
	errs = append(errs, c.validateCustom()...)
	errs = append(errs, c.Monitors.validate()...)
	errs = append(errs, detection.Errors(detection.MinPeriod("exporter.heartbeat", c.Exporter.Heartbeat))...)
	if c.Exporter.Coalesce.Duration < 0 || c.Exporter.Coalesce.Duration > time.Second {
		errs = append(errs, fmt.Errorf("exporter.coalesce: %v must be between 0 and 1s", c.Exporter.Coalesce.Duration))
	}
	switch c.Sources.Journal.Mode {
	case JournalCtl, JournalFile, JournalOff:
	default:
		errs = append(errs, fmt.Errorf("sources.journal.mode: %q is not journalctl, file or off", c.Sources.Journal.Mode))
	}
	errs = append(errs, detection.Errors(
		detection.AbsolutePath("sources.journal.directory", c.Sources.Journal.Directory),
		detection.AbsolutePath("sources.journal.file", c.Sources.Journal.File),
	)...)
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// validateReasonOverride checks one entry of reasons: name is a reason or a
// family (docs/reasons.md), and each setting must make sense for the reason,
// or for at least one member of the family (the others ignore it): a severity
// may only be lowered, for every member.
func validateReasonOverride(name string, rc ReasonConfig) []error {
	members, ok := health.Expand(name)
	if !ok {
		if health.IsCustomReason(name) {
			return []error{fmt.Errorf("reasons.%s: a custom reason is configured where it is defined (customRules, customChecks, promote), not here", name)}
		}
		return []error{fmt.Errorf("reasons.%s: unknown reason or family (see docs/reasons.md)", name)}
	}
	if rc.Promote != nil && (len(members) > 1 || members[0] != name) {
		return []error{fmt.Errorf("reasons.%s.promote: promote one reason, not a family: each member repeats on its own", name)}
	}
	var rs []health.Reason
	for _, m := range members {
		r, _ := health.LookupReason(m)
		rs = append(rs, r)
	}
	family := len(members) > 1 || members[0] != name
	var errs []error
	if rc.Severity != "" {
		s := health.Severity(rc.Severity)
		if !s.Valid() {
			errs = append(errs, fmt.Errorf("reasons.%s.severity: %q is not Fatal, Warning or Info", name, rc.Severity))
		} else if i := slices.IndexFunc(rs, func(r health.Reason) bool { return !s.AtMost(r.Severity) }); i >= 0 {
			from := string(rs[i].Severity)
			if len(rs) > 1 {
				from += " (" + rs[i].Name + ")"
			}
			errs = append(errs, fmt.Errorf("reasons.%s.severity: may only be lowered from %s, not raised to %s", name, from, s))
		}
	}
	if rc.QuietPeriod != nil {
		switch {
		case !slices.ContainsFunc(rs, func(r health.Reason) bool { return r.Source == health.FromLog }):
			why := "this one recovers when its check passes"
			if family {
				why = "no member of this family is log-derived"
			}
			errs = append(errs, fmt.Errorf("reasons.%s.quietPeriod: only log-derived reasons have a quiet period; %s", name, why))
		case rc.QuietPeriod.Duration < MinQuietPeriod:
			errs = append(errs, fmt.Errorf("reasons.%s.quietPeriod: %v is shorter than the %v floor: a log-derived fault must stay reported long enough for a repair toleration to pass, or it is never repaired (docs/agent-config.md)",
				name, rc.QuietPeriod.Duration, MinQuietPeriod))
		}
	}
	if rc.Threshold != nil {
		i := slices.IndexFunc(rs, func(r health.Reason) bool { return r.Threshold != nil })
		switch {
		case i < 0 && family:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: no member of this family has a threshold", name))
		case i < 0:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: this reason has no threshold", name))
		case *rc.Threshold <= 0:
			errs = append(errs, fmt.Errorf("reasons.%s.threshold: must be positive (unit: %s)", name, rs[i].Threshold.Unit))
		}
	}
	return errs
}

// MonitorEnabled reports whether the named registry monitor is on.
func (c Config) MonitorEnabled(name string) bool {
	sec := c.Monitors.Section(name)
	return sec != nil && sec.On()
}

// Effective returns the registry entry of a reason with the config's
// overrides applied, and false when the reason is disabled or unknown. The
// overrides of the families the reason belongs to apply first; the reason's
// own entry, field by field, takes precedence.
func (c Config) Effective(name string) (health.Reason, bool) {
	r, ok := health.LookupReason(name)
	if !ok {
		if health.IsCustomReason(name) {
			// An operator's reason is configured where it is defined.
			r, ok = c.CustomReasons()[name]
		}
		return r, ok
	}
	registered := r.Severity
	for _, rc := range c.overridesOf(name) {
		if rc.Disabled {
			return r, false
		}
		if rc.Severity != "" && health.Severity(rc.Severity).AtMost(registered) {
			r.Severity = health.Severity(rc.Severity)
		}
		if rc.QuietPeriod != nil && r.Source == health.FromLog {
			r.QuietPeriod = rc.QuietPeriod.Duration
		}
		if rc.Threshold != nil && r.Threshold != nil {
			t := *r.Threshold
			t.Default = *rc.Threshold
			r.Threshold = &t
		}
	}
	return r, true
}

// overridesOf returns the overrides that apply to a reason, least specific
// first: its families' (in registry order), then its own.
func (c Config) overridesOf(name string) []ReasonConfig {
	var out []ReasonConfig
	for _, f := range health.FamiliesOf(name) {
		if rc, ok := c.Reasons[f]; ok && f != name {
			out = append(out, rc)
		}
	}
	if rc, ok := c.Reasons[name]; ok {
		out = append(out, rc)
	}
	return out
}

// Threshold returns the effective threshold of a reason (0 when it has none).
func (c Config) Threshold(name string) float64 {
	if r, ok := c.Effective(name); ok && r.Threshold != nil {
		return r.Threshold.Default
	}
	if r, ok := health.LookupReason(name); ok && r.Threshold != nil {
		return r.Threshold.Default
	}
	return 0
}
