package dcgm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// DiagStatus is a diagnostic test result as dcgmi prints it.
type DiagStatus string

// Diagnostic results. dcgmi 4.x prints "Pass", "Skip", "Fail" (a warning is
// printed "Fail" too: dcgmi/Diag.cpp HelperDisplayDiagResult without
// DDR_DISPLAY_WARN); 3.x printed "Pass", "Fail", "Warn", "Skip" in any case.
const (
	DiagPass   DiagStatus = "Pass"
	DiagFail   DiagStatus = "Fail"
	DiagWarn   DiagStatus = "Warn"
	DiagSkip   DiagStatus = "Skip"
	DiagNotRun DiagStatus = "Not Run"
)

func normalizeStatus(s string) DiagStatus {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pass", "passed":
		return DiagPass
	case "fail", "failed":
		return DiagFail
	case "warn", "warning":
		return DiagWarn
	case "skip", "skipped":
		return DiagSkip
	}
	return DiagNotRun
}

// ErrorSeverity is dcgm_errors.h dcgmErrorSeverity_t.
type ErrorSeverity int

// Diagnostic error severities.
const (
	SeverityNone    ErrorSeverity = 0 // DCGM_ERROR_NONE
	SeverityMonitor ErrorSeverity = 1 // DCGM_ERROR_MONITOR: can run work, keep watching
	SeverityIsolate ErrorSeverity = 2 // DCGM_ERROR_ISOLATE: cannot run work, isolate the GPU
	SeverityUnknown ErrorSeverity = 3 // DCGM_ERROR_UNKNOWN
	SeverityTriage  ErrorSeverity = 4 // DCGM_ERROR_TRIAGE
	SeverityConfig  ErrorSeverity = 5 // DCGM_ERROR_CONFIG: a configuration problem
	SeverityReset   ErrorSeverity = 6 // DCGM_ERROR_RESET: drain and reset the GPU
)

// DiagError is one error or warning of a test result.
type DiagError struct {
	Message  string
	Code     Code
	Category int
	Severity ErrorSeverity
	// HasSeverity is false when dcgmi printed no error_severity (3.x).
	HasSeverity bool
}

// DiagResult is one test's result on one entity (or the whole node).
type DiagResult struct {
	// Entity is empty for a node-wide result (3.x software tests list
	// several GPU ids: Entity.ID is then "0,1,2").
	Entity Entity
	Status DiagStatus
	Errors []DiagError
	Info   []string
}

// DiagTest is one test (plugin) of a run.
type DiagTest struct {
	Category string
	Name     string
	Results  []DiagResult
}

// DiagReport is one `dcgmi diag --run N --json`.
type DiagReport struct {
	Version       string
	DriverVersion string
	Tests         []DiagTest
	// RuntimeError is set when the diagnostic could not run at all.
	RuntimeError string
}

// Failed lists the results that failed or warned.
func (r DiagReport) Failed() []FailedResult {
	var out []FailedResult
	for _, t := range r.Tests {
		for _, res := range t.Results {
			if res.Status == DiagFail || res.Status == DiagWarn {
				out = append(out, FailedResult{Test: t, Result: res})
			}
		}
	}
	return out
}

// FailedResult is a result that did not pass, with its test.
type FailedResult struct {
	Test   DiagTest
	Result DiagResult
}

// Summary is a one-line account for humans: "Fail: 2 of 11 test results
// failed (memory on GPU 0, pcie on GPU 1)".
func (r DiagReport) Summary() string {
	if r.RuntimeError != "" {
		return "the diagnostic did not run: " + r.RuntimeError
	}
	total := 0
	for _, t := range r.Tests {
		total += len(t.Results)
	}
	failed := r.Failed()
	if len(failed) == 0 {
		return fmt.Sprintf("Pass: %d test results, none failed", total)
	}
	var names []string
	for _, f := range failed {
		n := f.Test.Name
		if s := f.Result.Entity.Subject(); s != "" {
			n += " on " + s
		}
		names = append(names, n)
		if len(names) == 8 {
			names = append(names, "...")
			break
		}
	}
	return fmt.Sprintf("Fail: %d of %d test results did not pass (%s)", len(failed), total, strings.Join(names, ", "))
}

// The JSON of dcgmi diag. 4.x (dcgmi/Diag.cpp HelperJsonBuildOutput, key
// names from nvvs/include/NvvsJsonStrings.h):
//
//	"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
//	    "results": [{"entity_group_id", "entity_group", "entity_id", "status",
//	        "warnings": [{"warning", "error_id", "error_category", "error_severity"}], "info": [...]}],
//	    "test_summary": {"status", "warnings"}}]}],
//	    "runtime_error", "version"}
//	"entity_groups": [...], "metadata": {"version", "Driver Version Detected"}
//
// 3.x nests the same under "DCGM GPU Diagnostic" and names the GPU of a
// result "gpu_ids" (a comma-separated list for software tests) or "gpu_id";
// its warnings are objects or plain strings.
type diagDocument struct {
	V4            *diagBody      `json:"DCGM Diagnostic"`
	V3            *diagBody      `json:"DCGM GPU Diagnostic"`
	Metadata      map[string]any `json:"metadata"`
	DriverVersion string         `json:"Driver Version Detected"`
}

type diagBody struct {
	Categories   []*diagCategory `json:"test_categories"`
	RuntimeError string          `json:"runtime_error"`
	Version      string          `json:"version"`
}

type diagCategory struct {
	Category string      `json:"category"`
	Tests    []*diagTest `json:"tests"`
}

type diagTest struct {
	Name    string        `json:"name"`
	Results []*diagResult `json:"results"`
}

type diagResult struct {
	EntityGroup   string            `json:"entity_group"`
	EntityGroupID *int              `json:"entity_group_id"`
	EntityID      json.RawMessage   `json:"entity_id"`
	GPUIDs        json.RawMessage   `json:"gpu_ids"`
	GPUID         json.RawMessage   `json:"gpu_id"`
	Status        string            `json:"status"`
	Warnings      []json.RawMessage `json:"warnings"`
	Info          []json.RawMessage `json:"info"`
}

type diagWarning struct {
	Warning  string `json:"warning"`
	ErrorID  *int   `json:"error_id"`
	Category *int   `json:"error_category"`
	Severity *int   `json:"error_severity"`
}

// maxDiagResults bounds a report (a real one has tests x entities, a few
// hundred at most).
const maxDiagResults = 16384

// ParseDiag reads the output of `dcgmi diag --run N --json`, DCGM 4.x or
// 3.x. Text dcgmi printed before the document is ignored.
func ParseDiag(out []byte) (DiagReport, error) {
	start := bytes.IndexByte(out, '{')
	if start < 0 {
		return DiagReport{}, errors.New("no JSON document in the output of dcgmi diag")
	}
	var doc diagDocument
	if err := json.NewDecoder(bytes.NewReader(out[start:])).Decode(&doc); err != nil {
		return DiagReport{}, fmt.Errorf("dcgmi diag output: %w", err)
	}
	body := doc.V4
	if body == nil {
		body = doc.V3
	}
	if body == nil {
		return DiagReport{}, errors.New("dcgmi diag output has neither \"DCGM Diagnostic\" nor \"DCGM GPU Diagnostic\"")
	}
	r := DiagReport{Version: body.Version, DriverVersion: doc.DriverVersion, RuntimeError: strings.TrimSpace(body.RuntimeError)}
	if v, ok := doc.Metadata["version"].(string); ok {
		r.Version = v
	}
	if v, ok := doc.Metadata["Driver Version Detected"].(string); ok {
		r.DriverVersion = v
	}
	n := 0
	for _, c := range body.Categories {
		if c == nil {
			continue
		}
		for _, t := range c.Tests {
			if t == nil {
				continue // dcgmi leaves nulls where a test reported nothing
			}
			test := DiagTest{Category: c.Category, Name: t.Name}
			for _, res := range t.Results {
				if res == nil {
					continue
				}
				dr, err := res.result()
				if err != nil {
					return DiagReport{}, fmt.Errorf("test %q: %w", t.Name, err)
				}
				if dr.Status == DiagNotRun {
					continue
				}
				test.Results = append(test.Results, dr)
				if n++; n > maxDiagResults {
					return DiagReport{}, fmt.Errorf("dcgmi diag output has more than %d results", maxDiagResults)
				}
			}
			r.Tests = append(r.Tests, test)
		}
	}
	if r.RuntimeError == "" && len(r.Tests) == 0 {
		return DiagReport{}, errors.New("dcgmi diag output has no test results and no runtime error")
	}
	return r, nil
}

func (res *diagResult) result() (DiagResult, error) {
	out := DiagResult{Status: normalizeStatus(res.Status)}
	switch {
	case res.EntityID != nil:
		id, err := jsonScalar(res.EntityID)
		if err != nil {
			return DiagResult{}, fmt.Errorf("entity_id: %w", err)
		}
		group := res.EntityGroup
		if group == "" {
			group = "GPU"
		}
		out.Entity = Entity{Group: group, ID: id}
	case res.GPUID != nil || res.GPUIDs != nil:
		raw := res.GPUID
		if raw == nil {
			raw = res.GPUIDs
		}
		id, err := jsonScalar(raw)
		if err != nil {
			return DiagResult{}, fmt.Errorf("gpu_ids: %w", err)
		}
		out.Entity = Entity{Group: "GPU", ID: id}
	}
	for _, w := range res.Warnings {
		var s string
		if json.Unmarshal(w, &s) == nil {
			out.Errors = append(out.Errors, DiagError{Message: s, Code: CodeUnknown})
			continue
		}
		var dw diagWarning
		if err := json.Unmarshal(w, &dw); err != nil {
			return DiagResult{}, fmt.Errorf("warnings: %w", err)
		}
		de := DiagError{Message: dw.Warning, Code: CodeUnknown}
		if dw.ErrorID != nil {
			de.Code = Code(*dw.ErrorID)
		}
		if dw.Category != nil {
			de.Category = *dw.Category
		}
		if dw.Severity != nil {
			de.Severity, de.HasSeverity = ErrorSeverity(*dw.Severity), true
		}
		out.Errors = append(out.Errors, de)
	}
	for _, i := range res.Info {
		var s string
		if json.Unmarshal(i, &s) == nil {
			out.Info = append(out.Info, s)
		}
	}
	return out, nil
}

// jsonScalar renders a JSON number or string as text.
func jsonScalar(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", err
	}
	return n.String(), nil
}
