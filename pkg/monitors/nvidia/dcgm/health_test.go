package dcgm

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/health"
)

// The fixtures under testdata/health are `dcgmi health --check --json`
// documents rendered the way dcgmi 4.6 renders them (dcgmi/Health.cpp:
// incidents of one system joined with ", " and wrapped into 54-character
// overflow lines; dcgmi/DcgmiOutput.cpp: body/children/value/overflow), with
// the incidents DcgmHealthWatch.cpp raises for each system and grade: message
// formats of dcgm_errors.h, their next steps, and the "(triggered by XID N:
// ...)" details. SM, PMU and MCU are watch bits DCGM never reports on
// (dcgmi/Health.cpp does not even display them); gradesDCGMGives lists the
// systems and grades DCGM does report.

type want struct {
	reason   string
	severity health.Severity
	subject  string
}

func readFixture(t *testing.T, parts ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestHealthFixtures(t *testing.T) {
	cases := []struct {
		fixture string
		overall Grade
		want    []want
	}{
		{"pass", Healthy, nil},
		{"pcie-warn", Warn, []want{
			{"DCGMHealthCode3", health.Warning, "GPU 0"},
			{"DCGMHealthCode101", health.Warning, "GPU 1"}, // XID 38, a PCIe-subsystem XID
		}},
		{"memory-warn", Warn, []want{
			{"DCGMHealthCode6", health.Warning, "GPU 2"},
			{"DCGMHealthCode132", health.Warning, "GPU 2"},
			{"DCGMHealthCode101", health.Warning, "GPU 3"}, // XID 31
		}},
		{"memory-fail", Fail, []want{
			{"DCGMHealthCode4", health.Fatal, "GPU 0"},
			{"DCGMHealthCode80", health.Fatal, "GPU 0"},
			{"DCGMHealthCode7", health.Fatal, "GPU 1"},
			{"DCGMHealthCode8", health.Fatal, "GPU 4"},
			{"DCGMHealthCode52", health.Fatal, "GPU 5"},
			{"DCGMHealthCode101", health.Warning, "GPU 6"}, // XID 43 beside a double-bit error
			{"DCGMHealthCode4", health.Fatal, "GPU 6"},
		}},
		{"inforom-warn", Warn, []want{{"DCGMHealthCode9", health.Warning, "GPU 0"}}},
		{"thermal-warn", Warn, []want{
			{"DCGMHealthCode36", health.Warning, "CPU 0"},
			{"DCGMHealthCode10", health.Warning, "GPU 1"},
		}},
		{"thermal-fail", Fail, []want{{"DCGMHealthCode36", health.Fatal, "CPU 1"}}},
		{"power-warn", Warn, []want{
			{"DCGMHealthCode11", health.Warning, "GPU 0"},
			{"DCGMHealthCode12", health.Warning, "GPU 1"},
		}},
		{"power-fail", Fail, []want{{"DCGMHealthCode36", health.Fatal, "CPU 0"}}},
		{"nvlink-warn", Fail, []want{
			{"DCGMHealthCode13", health.Warning, "GPU 0"},
			{"DCGMHealthCode71", health.Warning, "GPU 1"}, // a lifetime CRC counter, graded Failure by DCGM
			{"DCGMHealthCode71", health.Warning, "GPU 2"}, // Blackwell recovery that succeeded
			{"DCGMHealthCode101", health.Warning, "GPU 3"},
			{"DCGMHealthCode123", health.Warning, "GPU 4"},
			{"DCGMHealthCode122", health.Warning, ""}, // IMEX daemon, graded Failure by DCGM
		}},
		{"nvlink-fail", Fail, []want{
			{"DCGMHealthCode14", health.Fatal, "GPU 0"}, // two links down: one finding
			{"DCGMHealthCode70", health.Fatal, "GPU 1"},
			{"DCGMHealthCode71", health.Fatal, "GPU 2"},
			{"DCGMHealthCode119", health.Fatal, "GPU 3"},
			{"DCGMHealthCode121", health.Fatal, "GPU 4"},
			{"DCGMHealthCode33", health.Fatal, "GPU 5"},
			{"DCGMHealthCode123", health.Warning, "GPU 6"}, // fabric manager not started
		}},
		{"driver-warn", Warn, []want{{"DCGMHealthCode127", health.Warning, "GPU 0"}}},
		{"driver-fail", Fail, []want{
			{"DCGMHealthCode125", health.Fatal, "GPU 0"},
			{"DCGMHealthCode126", health.Fatal, "GPU 1"},
			{"DCGMHealthCode128", health.Fatal, "GPU 2"},
		}},
		{"nvswitch-warn", Warn, []want{{"DCGMHealthCode16", health.Warning, "Switch 0"}}},
		{"nvswitch-fail", Fail, []want{
			{"DCGMHealthCode15", health.Fatal, "Switch 1"},
			{"DCGMHealthCode14", health.Fatal, "Switch 1"},
		}},
		{"connectx-warn", Warn, []want{{"DCGMHealthCode33", health.Warning, "ConnectX 0"}}},
		{"connectx-fail", Fail, []want{{"DCGMHealthCode33", health.Fatal, "ConnectX 1"}}},
		{"all-fail", Fail, []want{
			{"DCGMHealthCode120", health.Fatal, "GPU 0"},
			{"DCGMHealthCode101", health.Fatal, "GPU 1"}, // XID 48
			{"DCGMHealthCode81", health.Fatal, "GPU 2"},
			{"DCGMHealthCode131", health.Warning, "GPU 3"},
		}},
		{"unrecognized", Fail, []want{{"DCGMHealthCode1", health.Fatal, "GPU 7"}}},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.fixture] = true
		t.Run(c.fixture, func(t *testing.T) {
			r, err := ParseHealth(readFixture(t, "health", c.fixture+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Overall != c.overall {
				t.Errorf("overall = %v, want %v", r.Overall, c.overall)
			}
			got := HealthFindings(r)
			var gotW []want
			for _, f := range got {
				gotW = append(gotW, want{f.Reason, f.Severity, f.Subject})
				if _, ok := health.LookupReason(f.Reason); !ok {
					t.Errorf("%s is not in the registry", f.Reason)
				}
				if !strings.HasPrefix(f.Message, "DCGM health check, ") {
					t.Errorf("message %q", f.Message)
				}
			}
			sortWants(gotW)
			exp := slices.Clone(c.want)
			sortWants(exp)
			if !slices.Equal(gotW, exp) {
				t.Errorf("findings\n got %v\nwant %v", gotW, exp)
			}
		})
	}
	files, _ := filepath.Glob("testdata/health/*.json")
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".json"); !seen[name] {
			t.Errorf("fixture %s has no test case", name)
		}
	}
}

// gradesDCGMGives are the (entity group, system as dcgmi labels it, grade)
// triples DCGM 4.6's health watch can report (modules/health/
// DcgmHealthWatch.cpp SetResponse calls; dcgmi/Health.cpp
// HelperSystemToString): the fixtures must show each one. PCIe and InfoROM
// are only ever warnings; thermal and power fail only for CPUs (GPU
// thermal and power incidents are clocks events, warnings); XIDs that
// concern every system and NvSwitch errors are "Internal error" to dcgmi;
// the IMEX daemon is the node's (group None).
var gradesDCGMGives = []string{
	"GPU/PCIe system=Warning",
	"GPU/Memory system=Warning", "GPU/Memory system=Failure",
	"GPU/InfoROM system=Warning",
	"GPU/Thermal system=Warning", "CPU/Thermal system=Warning", "CPU/Thermal system=Failure",
	"GPU/Power system=Warning", "CPU/Power system=Failure",
	"GPU/NVLINK system=Warning", "GPU/NVLINK system=Failure", "None/NVLINK system=Failure",
	"GPU/Driver=Warning", "GPU/Driver=Failure",
	"Switch/Internal error=Warning", "Switch/Internal error=Failure",
	"ConnectX/ConnectX system=Warning", "ConnectX/ConnectX system=Failure",
	"GPU/Internal error=Warning", "GPU/Internal error=Failure",
}

// Every system and grade DCGM reports has a fixture, and so has a check
// where everything passes.
func TestFixturesCoverEverySystemAndGrade(t *testing.T) {
	shown := map[string]bool{}
	healthy := false
	for _, r := range healthFixtureReports(t) {
		healthy = healthy || (r.Overall == Healthy && len(r.Incidents) == 0)
		for _, inc := range r.Incidents {
			shown[inc.Entity.Group+"/"+inc.System+"="+inc.Grade.String()] = true
		}
	}
	if !healthy {
		t.Error("no fixture of a healthy node")
	}
	for _, g := range gradesDCGMGives {
		if !shown[g] {
			t.Errorf("no fixture shows %s", g)
		}
	}
}

// healthFixtureReports parses every fixture under testdata/health.
func healthFixtureReports(t *testing.T) []HealthReport {
	t.Helper()
	files, _ := filepath.Glob("testdata/health/*.json")
	var out []HealthReport
	for _, f := range files {
		data, _ := os.ReadFile(f)
		r, err := ParseHealth(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, r)
	}
	return out
}

func sortWants(ws []want) {
	slices.SortFunc(ws, func(a, b want) int {
		return strings.Compare(a.reason+"/"+a.subject, b.reason+"/"+b.subject)
	})
}

// Every health code the registry lists has a fixture that raises it at its
// registry severity, and every code the recognizer knows is registered.
func TestEveryHealthCodeIsRegisteredAndCovered(t *testing.T) {
	raised := map[string]health.Severity{}
	for _, r := range healthFixtureReports(t) {
		for _, fd := range HealthFindings(r) {
			if !fd.Severity.AtMost(raised[fd.Reason]) || raised[fd.Reason] == "" {
				raised[fd.Reason] = fd.Severity
			}
		}
	}
	for _, c := range HealthCodes() {
		name := HealthCodeReason(c)
		if name != "DCGMHealthCode"+strconv.Itoa(int(c)) {
			t.Errorf("%v is not in the registry (reported as %s)", c, name)
			continue
		}
		r, _ := health.LookupReason(name)
		if got, ok := raised[name]; !ok {
			t.Errorf("no fixture raises %s", name)
		} else if got != r.Severity {
			t.Errorf("%s: the fixtures raise it at most %s, the registry says %s", name, got, r.Severity)
		}
	}
	for _, r := range health.Reasons() {
		if strings.HasPrefix(r.Name, "DCGMHealthCode") {
			if _, ok := raised[r.Name]; !ok {
				t.Errorf("registry reason %s is never raised by the recognizer", r.Name)
			}
		}
	}
}

func TestCodeNames(t *testing.T) {
	for c, name := range map[Code]string{0: "OK", 33: "FIELD_VIOLATION", 71: "NVLINK_ERROR_CRITICAL", 101: "XID_ERROR",
		120: "FALLEN_OFF_BUS", 132: "UNCORRECTABLE_ROW_REMAP_LIMIT"} {
		if want := "DCGM_FR_" + name + " (" + strconv.Itoa(int(c)) + ")"; c.String() != want {
			t.Errorf("%d: %s", int(c), c.String())
		}
	}
	for i, n := range codeNames {
		if n == "" {
			t.Errorf("code %d has no name", i)
		}
	}
	if Code(500).String() != "DCGM error code 500" {
		t.Error(Code(500).String())
	}
}
