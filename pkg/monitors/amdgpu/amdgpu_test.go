package amdgpu

import (
	"context"
	"testing"
	"time"

	"nodemend.dev/nodemend/internal/testsupport/hostroot"
	"nodemend.dev/nodemend/internal/testsupport/monitortest"
	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/logline"
	"nodemend.dev/nodemend/pkg/monitors/accel"
	"nodemend.dev/nodemend/pkg/rules"
)

var t0 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// The err_count format is amdgpu_ras.c amdgpu_ras_sysfs_read():
// sysfs_emit(buf, "%s: %lu\n%s: %lu\n", "ue", ue_count, "ce", ce_count).
func TestParseErrCount(t *testing.T) {
	cases := map[string]struct {
		rc RASCount
		ok bool
	}{
		"ue: 0\nce: 0\n":      {RASCount{}, true},
		"ue: 2\nce: 117\n":    {RASCount{UE: 2, CE: 117}, true},
		"ue: 1\n":             {RASCount{}, false},
		"ue: -1\nce: 0\n":     {RASCount{}, false},
		"garbage":             {RASCount{}, false},
		"ce: 5\nue: 0":        {RASCount{CE: 5}, true},
		"ue: 3 \nce:  4 \n\n": {RASCount{UE: 3, CE: 4}, true},
	}
	for in, want := range cases {
		rc, ok := ParseErrCount([]byte(in))
		if rc != want.rc || ok != want.ok {
			t.Errorf("ParseErrCount(%q) = %+v, %v", in, rc, ok)
		}
	}
}

func FuzzParseErrCount(f *testing.F) {
	f.Add([]byte("ue: 2\nce: 117\n"))
	f.Add([]byte("DRIVER=amdgpu\nPCI_SLOT_NAME=0000:c1:00.0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ParseErrCount(data)
		ParseUevent(data)
	})
}

func TestRules(t *testing.T) {
	m := New(detection.Env{}, Options{})
	matcher, err := rules.Compile(m.Rules())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		line, reason, subject, msg string
	}{
		{"amdgpu 0000:c1:00.0: amdgpu: 3 uncorrectable hardware errors detected in umc block", health.ReasonAMDGPUHardwareError, "0000:c1:00.0",
			"GPU 0000:c1:00.0: 3 uncorrectable hardware errors in the umc block"},
		{"amdgpu 0000:c1:00.0: amdgpu: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", health.ReasonAMDGPUHardwareError, "0000:c1:00.0",
			"GPU 0000:c1:00.0: fatal RAS interrupt ERREVENT_ATHUB_INTERRUPT"},
		{"amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!", health.ReasonAMDGPUReset, "0000:c1:00.0", "GPU 0000:c1:00.0: GPU reset begun after a hang or error"},
		{"amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) failed", health.ReasonAMDGPUResetFailed, "0000:c1:00.0", "GPU 0000:c1:00.0: GPU reset 2 failed"},
		{"[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1234, emitted seq=1236", health.ReasonAMDGPURingTimeout, "",
			"job on ring gfx_0.0.0 timed out (signaled seq 1234, emitted 1236)"},
		{"amdgpu 0000:c1:00.0: amdgpu: 12 correctable hardware errors detected in umc block", "", "", ""},
		{"amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) succeeded!", "", "", ""},
	}
	for _, tc := range cases {
		var got []detection.Finding
		line := monitortest.Kernel(tc.line, t0)
		matcher.Match(line, func(mt logline.Match) { got = append(got, m.Interpret(mt)...) })
		monitortest.NoForgeryMatches(t, Rules(), []logline.Line{line})
		if tc.reason == "" {
			if got != nil {
				t.Errorf("%q: want nothing, got %+v", tc.line, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Reason != tc.reason || got[0].Subject != tc.subject || got[0].Message != tc.msg {
			t.Errorf("%q: got %+v", tc.line, got)
		}
	}
}

func TestChecks(t *testing.T) {
	ctx := context.Background()
	if New(detection.Env{HostRoot: hostroot.New(t).Dir}, Options{}).Applies(ctx) {
		t.Fatal("no amdgpu card: does not apply")
	}
	healthy := map[string][2]uint64{"umc": {0, 0}, "gfx": {0, 0}, "sdma": {0, 0}}
	root := hostroot.New(t).WithAMDGPUs(
		hostroot.AMDGPU{PCI: "0000:c1:00.0", RAS: healthy},
		hostroot.AMDGPU{PCI: "0000:c2:00.0", RAS: healthy},
	)
	// A non-AMD display card (the BMC's) and a connector must be ignored.
	root.WriteFile("sys/class/drm/card2/device/uevent", "DRIVER=ast\nPCI_SLOT_NAME=0000:03:00.0\n")
	root.WriteFile("sys/class/drm/card0-DP-1/status", "disconnected\n")
	now := t0
	clock := fakeClock{&now}
	m := New(detection.Env{HostRoot: root.Dir, Clock: clock}, Options{Expect: accel.ExpectOptions{Count: 2}})
	if !m.Applies(ctx) {
		t.Fatal("amdgpu cards present")
	}
	run := func(name string) []detection.Finding {
		for _, c := range m.Checks() {
			if c.Name == name {
				fs, err := c.Run(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return fs
			}
		}
		t.Fatalf("no check %s", name)
		return nil
	}
	if fs := append(run("amdgpu-device-count"), run("amdgpu-ras")...); fs != nil {
		t.Fatalf("healthy node: %+v", fs)
	}
	root.SetAMDGPU(1, hostroot.AMDGPU{PCI: "0000:c2:00.0", RAS: map[string][2]uint64{"umc": {1, 500}, "gfx": {0, 0}}})
	now = now.Add(time.Hour)
	fs := run("amdgpu-ras")
	if len(fs) != 2 || fs[0].Reason != health.ReasonAMDGPUUncorrectableError || fs[0].Subject != "0000:c2:00.0" ||
		fs[0].Message != "GPU 0000:c2:00.0: uncorrectable RAS errors since the driver loaded: umc 1" ||
		fs[1].Reason != health.ReasonAMDGPUCorrectableErrors {
		t.Fatalf("findings %+v", fs)
	}
	root.Remove("sys/class/drm/card1")
	fs = run("amdgpu-device-count")
	if len(fs) != 1 || fs[0].Message != "1 AMD GPUs bound to amdgpu, 2 expected (from the agent config)" {
		t.Fatalf("findings %+v", fs)
	}
}

type fakeClock struct{ now *time.Time }

func (c fakeClock) Now() time.Time                  { return *c.now }
func (c fakeClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }
