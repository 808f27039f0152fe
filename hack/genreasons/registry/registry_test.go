package registry

import (
	"strings"
	"testing"
)

const base = `
monitors:
  - {name: kernel, condition: KernelReady, healthyReason: KernelIsReady}
reasons:
  - {name: ForkFailedOutOfPIDs, condition: KernelReady, severity: Fatal, source: log, quietPeriod: 45m, description: d, detects: x}
  - {name: SoftLockup, condition: KernelReady, severity: Warning, source: log, description: d, detects: x}
`

func mustParse(t *testing.T, s string) *File {
	t.Helper()
	f, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCompatibility(t *testing.T) {
	lock, err := ParseLock(mustParse(t, base).RenderLock())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		registry string
		wantErr  string
	}{
		"unchanged": {registry: base},
		"addition passes": {registry: base + `  - {name: KernelBug, condition: KernelReady, severity: Warning, source: log, description: d, detects: x}
`},
		"rename fails": {
			registry: strings.Replace(base, "SoftLockup", "SoftLockedUp", 1),
			wantErr:  "released reason SoftLockup (KernelReady, Warning) was removed or renamed",
		},
		"removal fails": {
			registry: strings.Split(base, "  - {name: SoftLockup")[0],
			wantErr:  "SoftLockup (KernelReady, Warning) was removed",
		},
		"severity change fails": {
			registry: strings.Replace(base, "SoftLockup, condition: KernelReady, severity: Warning, source: log,", "SoftLockup, condition: KernelReady, severity: Fatal, source: log, quietPeriod: 1h,", 1),
			wantErr:  "SoftLockup changed severity from Warning to Fatal",
		},
		"condition move fails": {
			registry: strings.Replace(base, "SoftLockup, condition: KernelReady", "SoftLockup, condition: StorageReady", 1),
			wantErr:  "SoftLockup moved from KernelReady to StorageReady",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := mustParse(t, tc.registry).CheckCompatible(lock)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	cases := map[string]string{
		"unknown key":           strings.Replace(base, "detects: x}", "detects: x, colour: red}", 1),
		"unknown condition":     strings.Replace(base, "condition: KernelReady, severity: Warning", "condition: Ready, severity: Warning", 1),
		"bad severity":          strings.Replace(base, "severity: Warning", "severity: Critical", 1),
		"fatal log needs quiet": strings.Replace(base, "quietPeriod: 45m, ", "", 1),
		"duplicate":             base + "  - {name: SoftLockup, condition: KernelReady, severity: Warning, source: log, description: d, detects: x}\n",
		"kubelet condition":     strings.Replace(base, "condition: KernelReady, healthyReason", "condition: DiskPressure, healthyReason", 1),
	}
	for name, reg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(reg)); err == nil {
				t.Fatal("want a validation error")
			}
		})
	}
}
