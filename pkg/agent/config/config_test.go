package config

import (
	"strings"
	"testing"
	"time"

	"nodemend.dev/nodemend/pkg/health"
)

func TestParseDefaultsAndOverrides(t *testing.T) {
	c, err := Parse([]byte(`
monitors:
  containerRuntime:
    enabled: false
reasons:
  SoftLockup:
    disabled: true
  ForkFailedOutOfPIDs:
    severity: Warning
  ApproachingKernelPidMax:
    threshold: 85
  KernelBug:
    quietPeriod: 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.MonitorEnabled("kernel") || c.MonitorEnabled("containerRuntime") {
		t.Fatal("monitor toggles not applied")
	}
	if c.Monitors.Kernel.CheckInterval.Duration != 30*time.Second || c.Sources.Kmsg.Lookback.Duration != 10*time.Minute {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if _, ok := c.Effective(health.ReasonSoftLockup); ok {
		t.Fatal("disabled reason is still effective")
	}
	if r, _ := c.Effective(health.ReasonForkFailedOutOfPIDs); r.Severity != health.Warning {
		t.Fatalf("severity downgrade not applied: %v", r.Severity)
	}
	if got := c.Threshold(health.ReasonApproachingKernelPidMax); got != 85 {
		t.Fatalf("threshold override: got %v", got)
	}
	if r, _ := c.Effective(health.ReasonKernelBug); r.QuietPeriod != 2*time.Minute {
		t.Fatalf("quiet period override: got %v", r.QuietPeriod)
	}
	if got := c.Threshold(health.ReasonApproachingMaxOpenFiles); got != 70 {
		t.Fatalf("threshold default: got %v", got)
	}
}

func TestParseRejects(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown key":        {"monitors:\n  kernel:\n    enabeld: true\n", `unknown field "enabeld"`},
		"unknown reason":     {"reasons:\n  NoSuchReason: {disabled: true}\n", "reasons.NoSuchReason: unknown reason"},
		"severity upgrade":   {"reasons:\n  SoftLockup: {severity: Fatal}\n", "may only be lowered from Warning, not raised to Fatal"},
		"bad severity":       {"reasons:\n  SoftLockup: {severity: Critical}\n", `"Critical" is not Fatal, Warning or Info`},
		"threshold on none":  {"reasons:\n  SoftLockup: {threshold: 3}\n", "this reason has no threshold"},
		"negative threshold": {"reasons:\n  ApproachingKernelPidMax: {threshold: -1}\n", "must be positive"},
		"quiet on check":     {"reasons:\n  PodStuckTerminating: {quietPeriod: 1m}\n", "only log-derived reasons have a quiet period"},
		"bad duration":       {"monitors:\n  kernel:\n    checkInterval: soon\n", "invalid duration"},
		"tiny interval":      {"monitors:\n  kernel:\n    checkInterval: 10ms\n", "below the 1s minimum"},
		"journal mode":       {"sources:\n  journal:\n    mode: syslog\n", `"syslog" is not journalctl, file or off`},
		"relative path":      {"sources:\n  journal:\n    file: x.jsonl\n", "must be an absolute path"},
		"not yaml":           {"monitors: [", "invalid agent config"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.MonitorEnabled("kernel") || !c.MonitorEnabled("containerRuntime") {
		t.Fatal("monitors are on by default")
	}
}
