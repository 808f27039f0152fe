package detection

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Config is a monitor's section of the agent config file (monitors.<name>).
// Its type belongs to the monitor's package, with its defaults and its
// validation; the doc comments of its fields are the reference
// (docs/configuration.md is generated from them). The agent decodes it
// strictly: a key the type does not have is an error.
type Config interface {
	// On reports whether the monitor runs.
	On() bool
	// Validate checks the section once its defaults are filled in; path is
	// its key in the file ("monitors.kernel"), the prefix of every message.
	Validate(path string) []error
}

// Switch is the key every section has. Embed it inline, first.
type Switch struct {
	// Enabled runs the monitor. A disabled monitor writes no condition and
	// removes the one it wrote before (absent is not Unknown).
	Enabled *bool `json:"enabled,omitempty"`
}

// On reports whether the monitor is enabled.
func (s Switch) On() bool { return s.Enabled != nil && *s.Enabled }

// Enabled returns a switch that is on, for defaults.
func Enabled() Switch {
	on := true
	return Switch{Enabled: &on}
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration struct{ time.Duration }

// Seconds is a Duration of n seconds, for defaults.
func Seconds(n int) Duration { return Duration{time.Duration(n) * time.Second} }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// FillDefaults gives every key of c that the file left out, or set to its
// zero value, the value it has in d; nested structs are filled key by key.
// A list takes the default only when absent: an explicit empty list stays
// empty. To let a file set a zero value on purpose, use a pointer or a list.
func FillDefaults[T any](c *T, d T) {
	fill(reflect.ValueOf(c).Elem(), reflect.ValueOf(d))
}

func fill(dst, def reflect.Value) {
	if dst.Kind() == reflect.Struct {
		for i := range dst.NumField() {
			if dst.Type().Field(i).IsExported() {
				fill(dst.Field(i), def.Field(i))
			}
		}
		return
	}
	if dst.IsZero() {
		dst.Set(def)
	}
}

// MinPeriod refuses a period or timeout below one second: shorter ones would
// turn checks into load.
func MinPeriod(field string, d Duration) error {
	if d.Duration < time.Second {
		return fmt.Errorf("%s: %v is below the 1s minimum", field, d.Duration)
	}
	return nil
}

// NotLonger refuses a timeout longer than the period of its check.
func NotLonger(field string, timeout, period Duration) error {
	if timeout.Duration > period.Duration {
		return fmt.Errorf("%s: %v is longer than checkInterval %v", field, timeout.Duration, period.Duration)
	}
	return nil
}

// AbsolutePath refuses a relative host path (every host path is read under
// the host root). An empty path passes: it means the default.
func AbsolutePath(field, p string) error {
	if p != "" && !filepath.IsAbs(p) {
		return fmt.Errorf("%s: %q must be an absolute path (it is read under the host root)", field, p)
	}
	return nil
}

// HostPort reports whether s is "host:port" (or a bare host when the port
// is optional), with a port in 1-65535.
func HostPort(s string, needPort bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if needPort {
			return false
		}
		host, port = strings.Trim(s, "[]"), ""
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return false
	}
	if port == "" {
		return !needPort
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// Errors drops the nil errors of a section's checks.
func Errors(errs ...error) []error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
