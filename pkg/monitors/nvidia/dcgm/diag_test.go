package dcgm

import (
	"slices"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/health"
)

// The fixtures under testdata/diag are `dcgmi diag --run N --json`
// documents as dcgmi 4.6 prints them (dcgmi/Diag.cpp HelperJsonBuildOutput,
// HelperDisplayFailureMessage; keys from nvvs/include/NvvsJsonStrings.h;
// error codes, severities and categories from dcgmlib/src/dcgm_errors.c),
// and one DCGM 3.x document ("DCGM GPU Diagnostic", gpu_ids, null test
// slots, upper-case statuses).

func TestDiagFixtures(t *testing.T) {
	cases := []struct {
		fixture, version string
		tests, failed    int
		runtime          bool
		want             []want
	}{
		{fixture: "level1-pass", version: "4.6.0", tests: 1},
		{fixture: "level1-warn", version: "4.6.0", tests: 1, failed: 1,
			// Persistence mode disabled: dcgmi 4.x prints the warning "Fail",
			// DCGM grades it CONFIG.
			want: []want{{health.ReasonDCGMDiagnosticFailure, health.Warning, "GPU 1"}}},
		{fixture: "level2-fail", version: "4.6.0", tests: 3, failed: 3, want: []want{
			{health.ReasonDCGMDiagnosticFailure, health.Fatal, "GPU 0"}, // memory mismatch, ISOLATE
			{health.ReasonDCGMDiagnosticFailure, health.Fatal, "GPU 1"}, // low PCIe bandwidth (TRIAGE) and persistence mode
		}},
		{fixture: "level2-skip", version: "4.6.0", tests: 2},
		{fixture: "runtime-error", version: "4.6.0", runtime: true},
		{fixture: "v3-level2-fail", version: "3.3.9", tests: 3, failed: 2, want: []want{
			{health.ReasonDCGMDiagnosticFailure, health.Warning, ""}, // the software test's WARN covers GPUs 0 and 1
			{health.ReasonDCGMDiagnosticFailure, health.Fatal, "GPU 0"},
		}},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			r, err := ParseDiag(readFixture(t, "diag", c.fixture+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Version != c.version {
				t.Errorf("version %q", r.Version)
			}
			if (r.RuntimeError != "") != c.runtime {
				t.Errorf("runtime error %q", r.RuntimeError)
			}
			if len(r.Tests) != c.tests || len(r.Failed()) != c.failed {
				t.Errorf("%d tests, %d failed; want %d, %d", len(r.Tests), len(r.Failed()), c.tests, c.failed)
			}
			var got []want
			for _, f := range DiagFindings(r, 2) {
				got = append(got, want{f.Reason, f.Severity, f.Subject})
				if !strings.HasPrefix(f.Message, "DCGM diagnostic level 2 failed on ") {
					t.Errorf("message %q", f.Message)
				}
			}
			sortWants(got)
			exp := slices.Clone(c.want)
			sortWants(exp)
			if !slices.Equal(got, exp) {
				t.Errorf("findings\n got %v\nwant %v", got, exp)
			}
		})
	}
}

func TestDiagDetails(t *testing.T) {
	r, err := ParseDiag(readFixture(t, "diag", "level2-fail.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.DriverVersion != "580.95.05" {
		t.Errorf("driver %q", r.DriverVersion)
	}
	var mem DiagResult
	for _, tst := range r.Tests {
		if tst.Name == "memory" {
			mem = tst.Results[0]
		}
	}
	if mem.Entity != (Entity{"GPU", "0"}) || mem.Status != DiagFail || len(mem.Errors) != 1 {
		t.Fatalf("memory result %+v", mem)
	}
	e := mem.Errors[0]
	if e.Code != 58 || e.Severity != SeverityIsolate || !e.HasSeverity || e.Category != 10 {
		t.Errorf("error %+v", e)
	}
	if s := r.Summary(); !strings.HasPrefix(s, "Fail: 3 of 6 test results did not pass (software on GPU 1, memory on GPU 0, pcie on GPU 1)") {
		t.Errorf("summary %q", s)
	}
	fs := DiagFindings(r, 2)
	if !strings.Contains(fs[0].Message, "DCGM_FR_MEMORY_MISMATCH (58)") {
		t.Errorf("message %q", fs[0].Message)
	}
	pass, _ := ParseDiag(readFixture(t, "diag", "level1-pass.json"))
	if s := pass.Summary(); s != "Pass: 2 test results, none failed" {
		t.Errorf("summary %q", s)
	}
	rt, _ := ParseDiag(readFixture(t, "diag", "runtime-error.json"))
	if s := rt.Summary(); !strings.Contains(s, "did not run") || !strings.Contains(s, "in use") {
		t.Errorf("summary %q", s)
	}
}

func TestParseDiagRefusesWhatIsNotADiagnostic(t *testing.T) {
	for _, in := range []string{
		"",
		"Error: unable to establish a connection to the specified host: localhost\n",
		`{"body": {"Overall Health": {"value": "Healthy"}}}`,
		`{"DCGM Diagnostic": {}}`,
		`{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"entity_id": {}}]}]}]}}`,
		`{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"status": "Pass", "warnings": [7]}]}]}]}}`,
	} {
		if _, err := ParseDiag([]byte(in)); err == nil {
			t.Errorf("ParseDiag(%q) accepted it", in)
		}
	}
}

func TestDmonFixture(t *testing.T) {
	rows, err := ParseDmon(readFixture(t, "dmon", "clocks.txt"), []FieldID{FieldClocksEventReasons})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || !rows[4].Values[0].Blank || rows[2].Values[0].Int != 72 {
		t.Fatalf("rows %+v", rows)
	}
	var got []string
	for _, f := range FieldFindings(rows) {
		if f.Reason != "DCGMFieldError112" || f.Severity != health.Warning {
			t.Errorf("finding %+v", f)
		}
		got = append(got, f.Subject+": "+f.Message[strings.LastIndex(f.Message, ": ")+2:])
	}
	// 0 idle, 4 software power cap: how a busy GPU runs; 72 = 0x40|0x08
	// thermal; 136 = 0x80|0x08 power brake; 8 the power fast trigger.
	want := []string{
		"GPU 2: hardware thermal slowdown, hardware slowdown",
		"GPU 3: hardware power brake slowdown, hardware slowdown",
		"GPU 5: hardware slowdown",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if _, ok := health.LookupReason(FieldErrorReason(FieldClocksEventReasons)); !ok {
		t.Error("DCGMFieldError112 is not in the registry")
	}
}

func TestParseDmonErrors(t *testing.T) {
	fields := []FieldID{FieldClocksEventReasons}
	for _, in := range []string{
		"Error setting watches. Result: -5: Setting not configured\n",
		"#Entity   DVCCTR\nID\nGPU 0   1   2\n",
		"#Entity   DVCCTR\nID\nGPU 0   fast\n",
	} {
		if _, err := ParseDmon([]byte(in), fields); err == nil {
			t.Errorf("ParseDmon(%q) accepted it", in)
		}
	}
	rows, err := ParseDmon([]byte("#Entity   DVCCTR\nID\nGPU-I 3   1\nCPU Core 2  1\nGPU 1   0\n"), fields)
	if err != nil || len(rows) != 1 || rows[0].Entity.ID != "1" {
		t.Errorf("rows %+v, %v", rows, err)
	}
}
