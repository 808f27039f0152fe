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
		"unknown remedy":        strings.Replace(base, "quietPeriod: 45m, ", "quietPeriod: 45m, remedy: Pray, remedySource: s, ", 1),
		"remedy without source": strings.Replace(base, "quietPeriod: 45m, ", "quietPeriod: 45m, remedy: Reboot, ", 1),
		"source without remedy": strings.Replace(base, "quietPeriod: 45m, ", "quietPeriod: 45m, remedySource: s, ", 1),
		"remedy on a warning":   strings.Replace(base, "severity: Warning, source: log,", "severity: Warning, source: log, remedy: Reboot, remedySource: s,", 1),
	}
	if _, err := Parse([]byte(strings.Replace(base, "quietPeriod: 45m, ", "quietPeriod: 45m, remedy: Reboot, remedySource: s, ", 1))); err != nil {
		t.Fatalf("a Fatal reason with a remedy and its source: %v", err)
	}
	for name, reg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(reg)); err == nil {
				t.Fatal("want a validation error")
			}
		})
	}
}

func TestFamilies(t *testing.T) {
	const xids = `
monitors:
  - {name: nvidia, condition: AcceleratedHardwareReady, healthyReason: NvidiaGPUIsReady}
  - {name: kernel, condition: KernelReady, healthyReason: KernelIsReady}
reasons:
  - {name: NvidiaXID48Error, condition: AcceleratedHardwareReady, severity: Fatal, source: log, quietPeriod: 45m, description: d, detects: x}
  - {name: NvidiaXID79Error, condition: AcceleratedHardwareReady, severity: Fatal, source: log, quietPeriod: 45m, description: d, detects: x}
  - {name: NvidiaXID13Warning, condition: AcceleratedHardwareReady, severity: Warning, source: log, description: d, detects: x}
  - {name: NvidiaXIDWarning, condition: AcceleratedHardwareReady, severity: Warning, source: log, description: d, detects: x}
  - {name: NvidiaXIDxError, condition: AcceleratedHardwareReady, severity: Warning, source: log, description: d, detects: x}
  - {name: SoftLockup, condition: KernelReady, severity: Warning, source: log, description: d, detects: x}
`
	f := mustParse(t, xids+`families:
  - {name: NvidiaXIDError, template: "NvidiaXID%dError", description: d}
  - {name: NvidiaXIDWarning, template: "NvidiaXID%dWarning", description: d}
`)
	var got []string
	for _, fam := range f.Families {
		var names []string
		for _, m := range f.members(fam) {
			names = append(names, m.Name)
		}
		got = append(got, fam.Name+"="+strings.Join(names, ","))
	}
	// Digits only between prefix and suffix (not NvidiaXIDxError); a reason
	// named like its family is a member.
	want := []string{"NvidiaXIDError=NvidiaXID48Error,NvidiaXID79Error", "NvidiaXIDWarning=NvidiaXID13Warning,NvidiaXIDWarning"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("members:\n got %v\nwant %v", got, want)
	}
	src, err := f.RenderGo()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `Members:     []string{"NvidiaXID48Error", "NvidiaXID79Error"}`) {
		t.Fatalf("generated Go lacks the members:\n%s", src)
	}
	if !strings.Contains(string(f.RenderDocs()), "| `NvidiaXIDError` | `NvidiaXID48Error`, `NvidiaXID79Error` |") {
		t.Fatalf("docs lack the family table:\n%s", f.RenderDocs())
	}

	for name, tc := range map[string]struct{ family, wantErr string }{
		"no members":       {`{name: NoSuchError, template: "NoSuch%dError", description: d}`, "no reason matches"},
		"no placeholder":   {`{name: NvidiaXIDError, template: "NvidiaXIDError", description: d}`, "must contain %d exactly once"},
		"mixed conditions": {`{name: AnyWarning, template: "%dWarning", description: d}`, ""},
		"duplicate":        {`{name: SoftLockup, template: "NvidiaXID%dError", description: d}` + "\n  - " + `{name: SoftLockup, template: "NvidiaXID%dError", description: d}`, "duplicate"},
		"no description":   {`{name: NvidiaXIDError, template: "NvidiaXID%dError", description: ""}`, "description is required"},
		"bad severity":     {`{name: NvidiaXIDError, template: "NvidiaXID%dError", severity: Bad, description: d}`, "severity \"Bad\" is not Fatal"},
		"severity filters": {`{name: NvidiaXIDWarningOnly, template: "NvidiaXID%dError", severity: Warning, description: d}`, "no reason matches"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(xids + "families:\n  - " + tc.family + "\n"))
			if tc.wantErr == "" {
				// "%dWarning" needs digits at the start: no member, so an error too.
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	mixed := strings.Replace(xids, "NvidiaXID79Error, condition: AcceleratedHardwareReady", "NvidiaXID79Error, condition: KernelReady", 1)
	if _, err := Parse([]byte(mixed + "families:\n  - {name: NvidiaXIDError, template: \"NvidiaXID%dError\", description: d}\n")); err == nil || !strings.Contains(err.Error(), "different conditions") {
		t.Fatalf("mixed conditions: %v", err)
	}
}

// The chart's table holds the Fatal log-derived reasons only, by
// condition, and the families naming them with those members only.
func TestQuietPeriods(t *testing.T) {
	f := mustParse(t, base+`  - {name: KernelDeadlock, condition: KernelReady, severity: Fatal, source: check, description: d, detects: x}
  - {name: Kernel1Oops, condition: KernelReady, severity: Fatal, source: log, quietPeriod: 1h30m, description: d, detects: x}
  - {name: Kernel2Oops, condition: KernelReady, severity: Warning, source: log, description: d, detects: x}
families:
  - {name: KernelOops, template: 'Kernel%dOops', description: d}
`)
	out, err := f.RenderQuietPeriods()
	if err != nil {
		t.Fatal(err)
	}
	want := "conditions:\n  KernelReady:\n    ForkFailedOutOfPIDs: 45m0s\n    Kernel1Oops: 1h30m0s\nfamilies:\n  - name: KernelOops\n    members: [Kernel1Oops]\n"
	if !strings.HasSuffix(string(out), want) {
		t.Errorf("got\n%s\nwant it to end with\n%s", out, want)
	}
}
