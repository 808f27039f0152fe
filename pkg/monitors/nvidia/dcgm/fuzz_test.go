package dcgm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// wrap is dcgmi's line wrapping of health messages (dcgmi/Health.cpp
// AddErrorMessage): 54-character pieces cut at a word end, dropping the
// separator ('.', ',', '/' or space) it cuts at.
func wrap(msg string) []string {
	msg = strings.ReplaceAll(msg, "\n", " ")
	n := len(msg)
	if n <= 54 {
		return []string{msg}
	}
	var out []string
	p, start := 0, 0
	for start < n {
		p += 54
		switch {
		case p >= n:
			p = n - 1
		case p == n-1:
		default:
			for p > 0 && msg[p] != ' ' {
				if c := msg[p+1]; c == ' ' || c == '.' || c == ',' || c == '/' {
					break
				}
				p--
			}
			for p > 0 && msg[p] == ' ' {
				p--
			}
		}
		for start < n && msg[start] == ' ' {
			start++
		}
		if start >= n || p < start {
			break
		}
		out = append(out, msg[start:p+1])
		start = p + 2
	}
	return out
}

// healthDoc renders one system of one GPU as dcgmi does.
func healthDoc(grade string, messages ...string) []byte {
	doc := map[string]any{
		"body": map[string]any{
			"Overall Health": map[string]any{"value": grade},
			"GPU": map[string]any{"children": map[string]any{"0": map[string]any{
				"value": grade,
				"children": map[string]any{"Errors": map[string]any{"children": map[string]any{
					"Memory system": map[string]any{"value": grade, "overflow": wrap(strings.Join(messages, ", "))},
				}}},
			}}},
		},
		"header": []string{"Health Monitor Report"},
	}
	b, _ := json.Marshal(doc)
	return b
}

// sample fills a format's verbs with plausible values.
func sample(format string, seed int) string {
	i := 0
	return printfVerb.ReplaceAllStringFunc(format, func(v string) string {
		i++
		switch v[len(v)-1] {
		case '%':
			return "%"
		case 'd', 'i', 'u', 'c':
			return fmt.Sprint((seed*7 + i) % 100)
		case 'f', 'e', 'E', 'g', 'G':
			return fmt.Sprintf("%.2f", float64(seed%50)+0.25)
		}
		words := []string{"CRC FLIT", "DCGM_FI_DEV_CPU_TEMP_CELSIUS", "domain", "In Progress", "x/y.z"}
		return words[(seed+i)%len(words)]
	})
}

// Every health message format, filled in, followed by next steps, joined
// with others and wrapped wherever dcgmi wraps it, is recognized as its
// code.
func TestEveryFormatSurvivesWrapping(t *testing.T) {
	const next = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
	for seed := range 8 {
		for _, h := range healthCodes {
			for _, f := range h.formats {
				msg := sample(f, seed) + " " + next
				// Alone, and between two others (so its start lands anywhere in a line).
				filler := strings.Repeat("w", seed*5) + " " + sample(healthCodes[seed%len(healthCodes)].formats[0], seed)
				for _, text := range [][]string{{msg}, {filler, msg, filler}} {
					r, err := ParseHealth(healthDoc("Failure", text...))
					if err != nil {
						t.Fatal(err)
					}
					found := false
					for _, inc := range r.Incidents {
						found = found || inc.Code == h.code
					}
					if !found {
						t.Errorf("format %q (seed %d) not recognized in %q: %+v", f, seed, wrap(strings.Join(text, ", ")), r.Incidents)
					}
				}
			}
		}
	}
}

func TestWrapIsDcgmis(t *testing.T) {
	// The 54-column cut of dcgmi: at a word end, the space dropped.
	got := wrap("Detected 2 volatile double-bit ECC error(s) in GPU 0. Drain the GPU and reset it or reboot the node.")
	want := []string{"Detected 2 volatile double-bit ECC error(s) in GPU 0.", "Drain the GPU and reset it or reboot the node."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q", got)
	}
}

func FuzzParseHealth(f *testing.F) {
	f.Add(healthDoc("Warning", "Detected more than 8 PCIe replays per minute for GPU 0 : 27"))
	f.Add([]byte(`{"body": {"Overall Health": {"value": "Healthy"}}}`))
	f.Add([]byte(`Error: Health watches not enabled.`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseHealth(data)
		if err != nil {
			return
		}
		for _, fd := range HealthFindings(r) {
			if !strings.HasPrefix(fd.Reason, healthCodePrefix) || !fd.Severity.Valid() || len(fd.Message) > maxMessage {
				t.Fatalf("finding %+v", fd)
			}
		}
	})
}

func FuzzSplitIncidents(f *testing.F) {
	f.Add("GPU 0's NvLink link 3 is currently down Check, GPU 0's NvLink link 7 is currently down")
	f.Add("Detected XID 63 for GPU 1 (triggered by XID 63: A pending retired page has been detected in GPU 1.)")
	f.Fuzz(func(t *testing.T, text string) {
		norm := strings.TrimSpace(spaces.ReplaceAllString(text, " "))
		incs := splitIncidents(text)
		if len(incs) == 0 {
			t.Fatal("no incident: a graded system always has one")
		}
		for _, inc := range incs {
			if !inc.Recognized && inc.Code != CodeUnknown {
				t.Fatalf("unrecognized incident with code %v", inc.Code)
			}
			if norm != "" && !strings.Contains(norm, inc.Message) {
				t.Fatalf("message %q is not part of %q", inc.Message, norm)
			}
		}
	})
}

func FuzzParseDiag(f *testing.F) {
	f.Add([]byte(`{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Fail", "warnings": [{"warning": "x", "error_id": 58, "error_severity": 2}]}]}]}]}}`))
	f.Add([]byte(`{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [null, {"name": "a", "results": [{"gpu_ids": "0,1", "status": "WARN", "warnings": ["w"]}]}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseDiag(data)
		if err != nil {
			return
		}
		for _, fd := range DiagFindings(r, 1) {
			if fd.Reason != "DCGMDiagnosticFailure" || !fd.Severity.Valid() || len(fd.Message) > maxMessage {
				t.Fatalf("finding %+v", fd)
			}
		}
		_ = r.Summary()
	})
}

func FuzzParseDmon(f *testing.F) {
	f.Add([]byte("#Entity   DVCCTR\nID\nGPU 0   72\nGPU 1   N/A\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ParseDmon(data, []FieldID{FieldClocksEventReasons})
		if err != nil {
			return
		}
		for _, row := range rows {
			if len(row.Values) != 1 {
				t.Fatalf("row %+v", row)
			}
		}
		_ = FieldFindings(rows)
	})
}
