package gpucheck

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// The nvidia-smi outputs in testdata are written after nvidia-smi's manual
// and the outputs it documents; `make gpu-check` saves the real ones
// (_output/gpu-check/raw) to replace them with when a GPU machine runs it.
func readFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func statuses(r *Report) []Status {
	var s []Status
	for _, row := range r.Rows {
		s = append(s, row.Status)
	}
	return s
}

func TestReportTableAndVerdict(t *testing.T) {
	var r Report
	r.Add("NVML load", "node", Matched, "driver 570.86.15")
	r.Add("DCGM health", "node", NotPresent, "dcgmi is not installed")
	if !r.OK() {
		t.Error("matched and not present: OK() false, want true")
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CHECK", "NVML load", "not present", "1 matched, 0 differed, 1 not present, 0 failed, 0 skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	r.Add("NVLink", "GPU 0", Differed, "NVML 4 links, nvidia-smi 3\nsecond line")
	if r.OK() {
		t.Error("a differed row: OK() true, want false")
	}
	out.Reset()
	_ = r.Write(&out)
	if strings.Contains(out.String(), "\nsecond line") {
		t.Errorf("a detail broke the table's line:\n%s", out.String())
	}
}

func TestCompareDevices(t *testing.T) {
	smi, err := ParseSMIGPUs(readFixture(t, "identity.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(smi) != 2 || smi[1].PCI != "0000:2a:00" || smi[0].UUID != "GPU-4c2d0c5e-8d3f-4f7c-9b1a-2e6f0c1d2a3b" {
		t.Fatalf("parsed %+v", smi)
	}
	same := []nvidia.Device{
		{Index: 0, UUID: smi[0].UUID, PCI: "0000:18:00", Minor: 0},
		{Index: 1, UUID: smi[1].UUID, PCI: "0000:2a:00", Minor: 1},
	}
	for _, c := range []struct {
		name string
		nvml []nvidia.Device
		want []Status
	}{
		{"same GPUs", same, []Status{Matched, Matched, Matched}},
		{"one GPU missing from NVML", same[:1], []Status{Differed, Matched}},
		{"another UUID", []nvidia.Device{same[0], {Index: 1, UUID: "GPU-other", PCI: "0000:2a:00", Minor: 1}}, []Status{Matched, Matched, Differed}},
		{"no minor number", []nvidia.Device{same[0], {Index: 1, UUID: smi[1].UUID, PCI: "0000:2a:00", Minor: -1}}, []Status{Matched, Matched, Differed}},
	} {
		var r Report
		CompareDevices(&r, c.nvml, smi)
		if got := statuses(&r); !equal(got, c.want) {
			t.Errorf("%s: %v, want %v (%+v)", c.name, got, c.want, r.Rows)
		}
	}
	if _, err := ParseSMIGPUs("0, GPU-x, 3b:00\n"); err == nil {
		t.Error("a bus ID without domain: parsed, want an error")
	}
}

func equal(a, b []Status) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fieldValue is an nvmlFieldValue_t as nvmllib hands it over.
func fieldValue(id uint32, v uint64) nvidia.FieldValue {
	f := nvidia.FieldValue{ID: id, ValueType: 3} // unsigned long long
	binary.LittleEndian.PutUint64(f.Raw[:], v)
	return f
}

func TestCompareField(t *testing.T) {
	pairs := map[string]FieldPair{}
	for _, p := range FieldPairs() {
		pairs[p.SMI] = p
	}
	sample := nvidia.Sample{
		Fields: []nvidia.FieldValue{
			fieldValue(nvidia.FieldECCDBEVolatileTotal, 0),
			fieldValue(nvidia.FieldRemappedPending, 1),
			{ID: nvidia.FieldRetiredPending, Return: 3}, // NVML_ERROR_NOT_SUPPORTED
		},
		ClocksEventReasons: nvidia.Value{V: 0x4, OK: true},
	}
	for _, c := range []struct {
		smi    string
		out    string
		err    error
		want   Status
		detail string
	}{
		{"ecc.errors.uncorrected.volatile.total", "0\n", nil, Matched, "0 (NVML and nvidia-smi"},
		{"ecc.errors.uncorrected.volatile.total", "2\n", nil, Differed, "NVML 0, nvidia-smi 2"},
		{"ecc.errors.uncorrected.volatile.total", "[N/A]\n", nil, Differed, "nvidia-smi not reported"},
		{"remapped_rows.pending", "Yes\n", nil, Matched, "yes"},
		{"remapped_rows.pending", "No\n", nil, Differed, "NVML yes, nvidia-smi no"},
		{"retired_pages.pending", "[Not Supported]\n", nil, NotPresent, "neither"},
		{"retired_pages.pending", "No\n", nil, Differed, "NVML not reported"},
		{"remapped_rows.failure", "", errors.New(`Field "remapped_rows.failure" is not a valid field to query.`), NotPresent, "not a valid field"},
		{"clocks_event_reasons.active", "0x0000000000000004\n", nil, Matched, "0x4"},
		{"clocks_event_reasons.active", "0x0000000000000044\n", nil, Differed, "NVML 0x4, nvidia-smi 0x44"},
		{"clocks_event_reasons.active", "Active\n", nil, Differed, "unreadable"},
		{"clocks_event_reasons.active", "", errors.New("invalid field"), Differed, "invalid field"},
	} {
		var r Report
		CompareField(&r, "GPU 0", pairs[c.smi], sample, c.out, c.err)
		row := r.Rows[0]
		if row.Status != c.want || !strings.Contains(row.Detail, c.detail) {
			t.Errorf("%s = %q: %s %q, want %s containing %q", c.smi, c.out, row.Status, row.Detail, c.want, c.detail)
		}
	}
}

func TestCompareNVLink(t *testing.T) {
	out := readFixture(t, "nvlink-s.txt")
	up, down := nvidia.LinkUp, nvidia.LinkDown
	for _, c := range []struct {
		name  string
		links []nvidia.LinkState
		out   string
		want  Status
	}{
		{"same states", []nvidia.LinkState{up, up, down, up}, out, Matched},
		{"NVML sees link 2 up", []nvidia.LinkState{up, up, up, up}, out, Differed},
		{"NVML reads fewer links", []nvidia.LinkState{up, up}, out, Differed},
		{"no NVLink", []nvidia.LinkState{nvidia.LinkUnsupported}, "GPU 0: NVIDIA L4 (UUID: GPU-x)\n", NotPresent},
	} {
		var r Report
		CompareNVLink(&r, "GPU 0", nvidia.Sample{NVLinks: c.links}, c.out)
		if r.Rows[0].Status != c.want {
			t.Errorf("%s: %s %q, want %s", c.name, r.Rows[0].Status, r.Rows[0].Detail, c.want)
		}
	}
}

func TestCompareFabric(t *testing.T) {
	fabric, none := readFixture(t, "query-fabric.txt"), readFixture(t, "query-nofabric.txt")
	if f := ParseSMIFabric(fabric); !f.Present || f.State != "Completed" || f.Status != "Success" {
		t.Fatalf("parsed %+v", f)
	}
	completed := nvidia.FabricInfo{Supported: true, State: nvidia.FabricStateCompleted}
	for _, c := range []struct {
		name string
		nv   nvidia.FabricInfo
		q    string
		want Status
	}{
		{"completed, success", completed, fabric, Matched},
		{"no fabric", nvidia.FabricInfo{}, none, NotPresent},
		{"NVML has none, nvidia-smi has one", nvidia.FabricInfo{}, fabric, Differed},
		{"NVML still in progress", nvidia.FabricInfo{Supported: true, State: nvidia.FabricStateInProgress}, fabric, Differed},
		{"NVML status is an error", nvidia.FabricInfo{Supported: true, State: nvidia.FabricStateCompleted, Status: 999}, fabric, Differed},
	} {
		var r Report
		CompareFabric(&r, "GPU 0", nvidia.Sample{Fabric: c.nv}, c.q)
		if r.Rows[0].Status != c.want {
			t.Errorf("%s: %s %q, want %s", c.name, r.Rows[0].Status, r.Rows[0].Detail, c.want)
		}
	}
}

// dcgmi's real JSON is compared with the shapes of the fixtures the DCGM
// parsers are tested on: a key none of them has is structure never tested.
func TestNewKeysAgainstDCGMFixtures(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "pkg", "monitors", "nvidia", "dcgm", "testdata", "health")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no health fixtures in %s: %v", dir, err)
	}
	var fixtures [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fixtures = append(fixtures, data)
	}
	extra, err := NewKeys(fixtures[0], fixtures...)
	if err != nil || len(extra) != 0 {
		t.Errorf("a fixture against the fixtures: new keys %v, %v", extra, err)
	}
	// GPU 7 of an 8-GPU node is the same structure as the fixtures' GPU 0.
	gpu7 := bytes.ReplaceAll(fixtures[0], []byte(`"0" : {`), []byte(`"7" : {`))
	if bytes.Equal(gpu7, fixtures[0]) {
		t.Fatal(`the first health fixture has no "0" : { to rename`)
	}
	if extra, err := NewKeys(gpu7, fixtures...); err != nil || len(extra) != 0 {
		t.Errorf("GPU 7 instead of GPU 0: new keys %v, %v", extra, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(fixtures[0], &doc); err != nil {
		t.Fatal(err)
	}
	doc["driver_model"] = map[string]any{"fabric_manager": "running"}
	real, _ := json.Marshal(doc)
	extra, err = NewKeys(real, fixtures...)
	if err != nil || strings.Join(extra, ",") != "driver_model,driver_model.fabric_manager" {
		t.Errorf("new keys %v, %v; want driver_model and driver_model.fabric_manager", extra, err)
	}
	if _, err := NewKeys([]byte("Error: unable to connect")); err == nil {
		t.Error("dcgmi's prose instead of JSON: no error")
	}
}
