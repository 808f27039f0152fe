package dcgm

import (
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"nodemend.dev/nodemend/internal/command"
	"nodemend.dev/nodemend/pkg/detection"
)

// A config reload keeps the DCGM source (and its memory of a host engine
// that answered) unless the settings that reach dcgmi change.
func TestKeeperKeepsSourceAcrossReloads(t *testing.T) {
	k := &Keeper{Runner: command.NewScript(), Log: testr.New(t)}
	cfg := func(mode Mode, host string, every time.Duration) Config {
		return Config{Mode: mode, Dcgmi: "dcgmi", HostEngine: host, CheckInterval: detection.Duration{Duration: every}}
	}
	s1 := k.Source(cfg(Auto, "", time.Minute))
	if s1 == nil || k.Client() == nil {
		t.Fatal("no source")
	}
	if k.Source(cfg(Auto, "", 2*time.Minute)) != s1 {
		t.Error("a new check interval replaced the source")
	}
	if k.Source(cfg(Auto, "10.0.0.1:5555", time.Minute)) == s1 {
		t.Error("a new host engine kept the source")
	}
	if k.Source(cfg(Off, "", time.Minute)) != nil || k.Client() != nil {
		t.Error("mode off still has a source")
	}
}

// A keeper with DCGM off refuses a diagnostic as unavailable, without
// running anything.
func TestKeeperDiagnoseOff(t *testing.T) {
	k := &Keeper{Runner: command.NewScript(), Log: testr.New(t)}
	k.Source(Config{Mode: Off})
	if _, _, err := k.Diagnose(t.Context(), 1, time.Minute); !Unavailable(err) {
		t.Fatalf("Diagnose with DCGM off = %v, want unavailable", err)
	}
}
