package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/monitors"
)

// Monitors holds one section per monitor, keyed by monitor name. Each
// section's type, defaults and validation belong to its monitor's package
// (pkg/monitors/<kind>; the list of monitors is pkg/monitors.Table).
type Monitors struct {
	sections map[string]detection.Config
}

func defaultMonitors() Monitors {
	m := Monitors{sections: map[string]detection.Config{}}
	for _, k := range monitors.Table() {
		m.sections[k.Name] = k.Default()
	}
	return m
}

// Section returns the named monitor's section, nil for an unknown name.
func (m Monitors) Section(name string) detection.Config { return m.sections[name] }

// SectionOf returns m's section of type C, a monitor's config type, and
// whether m has it: one monitor's settings read by their type, without its
// name or a type assertion at the caller. A type several monitors share
// (accel.Config) names no one section: false.
func SectionOf[C detection.Config](m Monitors) (C, bool) {
	var zero C
	name := ""
	for _, k := range monitors.Table() {
		if k.Section() != reflect.TypeFor[C]() {
			continue
		}
		if name != "" {
			return zero, false
		}
		name = k.Name
	}
	c, ok := m.sections[name].(C)
	return c, ok
}

// UnmarshalJSON decodes each section strictly into its monitor's type.
func (m *Monitors) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.sections = map[string]detection.Config{}
	var names []string
	for _, k := range monitors.Table() {
		names = append(names, k.Name)
		r, ok := raw[k.Name]
		if !ok {
			continue
		}
		delete(raw, k.Name)
		c, err := k.Decode(r)
		if err != nil {
			return fmt.Errorf("monitors.%s: %w", k.Name, err)
		}
		m.sections[k.Name] = c
	}
	for name := range raw {
		return fmt.Errorf("monitors: unknown field %q (monitors are %s)", name, strings.Join(names, ", "))
	}
	return nil
}

// MarshalJSON writes the sections in the table's order.
func (m Monitors) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, k := range monitors.Table() {
		s, ok := m.sections[k.Name]
		if !ok {
			continue
		}
		v, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		fmt.Fprintf(&b, "%q:%s", k.Name, v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// fillDefaults gives a monitor the file does not mention its default section.
func (m *Monitors) fillDefaults() {
	if m.sections == nil {
		m.sections = map[string]detection.Config{}
	}
	for _, k := range monitors.Table() {
		if _, ok := m.sections[k.Name]; !ok {
			m.sections[k.Name] = k.Default()
		}
	}
}

func (m Monitors) validate() []error {
	var errs []error
	for _, k := range monitors.Table() {
		if s := m.sections[k.Name]; s != nil {
			errs = append(errs, s.Validate("monitors."+k.Name)...)
		}
	}
	return errs
}
