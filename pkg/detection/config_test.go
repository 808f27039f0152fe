package detection

import (
	"testing"
	"time"
)

type inner struct {
	Label string
	Count int
}

type section struct {
	Switch `json:",inline"`
	Period Duration
	Paths  []string
	Flag   *bool
	inner
	Nested inner
}

// A key left out, or set to its zero value, takes the default; nested
// structs are filled key by key; an explicit empty list or false stays.
func TestFillDefaults(t *testing.T) {
	on, off := true, false
	def := section{Switch: Enabled(), Period: Seconds(30), Paths: []string{"/"}, Flag: &on,
		inner: inner{Label: "hidden"}, Nested: inner{Label: "l", Count: 2}}

	var empty section
	FillDefaults(&empty, def)
	if !empty.On() || empty.Period.Duration != 30*time.Second || len(empty.Paths) != 1 || !*empty.Flag ||
		empty.Nested != (inner{"l", 2}) {
		t.Errorf("empty section: %+v", empty)
	}
	if empty.inner.Label != "" {
		t.Error("an unexported field was filled")
	}

	set := section{Switch: Switch{Enabled: &off}, Period: Seconds(5), Paths: []string{}, Flag: &off, Nested: inner{Count: 7}}
	FillDefaults(&set, def)
	if set.On() || set.Period.Duration != 5*time.Second || set.Paths == nil || len(set.Paths) != 0 || *set.Flag ||
		set.Nested != (inner{"l", 7}) {
		t.Errorf("set section: %+v", set)
	}
}

func TestValidators(t *testing.T) {
	if err := MinPeriod("m.checkInterval", Duration{Duration: 999 * time.Millisecond}); err == nil || err.Error() != "m.checkInterval: 999ms is below the 1s minimum" {
		t.Errorf("MinPeriod: %v", err)
	}
	if err := MinPeriod("m.checkInterval", Seconds(1)); err != nil {
		t.Error(err)
	}
	if err := NotLonger("m.probeTimeout", Seconds(31), Seconds(30)); err == nil || err.Error() != "m.probeTimeout: 31s is longer than checkInterval 30s" {
		t.Errorf("NotLonger: %v", err)
	}
	if err := AbsolutePath("m.socket", "run/x.sock"); err == nil {
		t.Error("a relative path passes")
	}
	if AbsolutePath("m.socket", "") != nil || AbsolutePath("m.socket", "/run/x.sock") != nil {
		t.Error("an empty or absolute path is refused")
	}
	if errs := Errors(nil, MinPeriod("x", Seconds(0)), nil); len(errs) != 1 {
		t.Errorf("Errors: %v", errs)
	}
}
