package dcgm

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// FieldID is a DCGM field identifier (dcgm_fields.h DCGM_FI_*).
type FieldID int

// FieldClocksEventReasons is DCGM_FI_DEV_CLOCKS_EVENT_REASONS, the bitmap of
// why the GPU's clocks are held down (the NVML clocks event reasons).
const FieldClocksEventReasons FieldID = 112

// Clocks event reason bits that mean the hardware slowed the GPU
// (dcgm_fields.h DCGM_CLOCKS_EVENT_REASON_*, 1:1 with nvml.h).
const (
	clocksHWSlowdown   int64 = 0x08
	clocksHWThermal    int64 = 0x40
	clocksHWPowerBrake int64 = 0x80
)

// FieldValue is one value as dcgmi printed it.
type FieldValue struct {
	Field FieldID
	// Blank is true for "N/A": no data, not supported or not permitted.
	Blank bool
	Int   int64
	Text  string
}

// FieldRow is the values of one entity.
type FieldRow struct {
	Entity Entity
	Values []FieldValue
}

// ParseDmon reads the output of `dcgmi dmon --field-id F1,F2 --count 1`
// (dcgmi/DeviceMonitor.cpp): header lines starting with "#Entity" and "ID",
// then one row per entity, "GPU 0" followed by the values in the order of
// fields, "N/A" for a blank. Rows of entities that are not GPUs are skipped.
func ParseDmon(out []byte, fields []FieldID) ([]FieldRow, error) {
	var rows []FieldRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || line == "ID" || strings.HasPrefix(line, "ID ") {
			continue
		}
		if strings.HasPrefix(line, "Error") || strings.HasPrefix(line, "dmon was stopped") {
			return nil, fmt.Errorf("dcgmi dmon: %s", line)
		}
		tok := strings.Fields(line)
		if len(tok) < 2 || tok[0] != "GPU" || !isDigits(tok[1]) {
			continue // another entity kind (GPU-I, Switch, CPU Core, a link)
		}
		vals := tok[2:]
		if len(vals) != len(fields) {
			return nil, fmt.Errorf("dcgmi dmon: row %q has %d values for %d fields", line, len(vals), len(fields))
		}
		row := FieldRow{Entity: Entity{Group: "GPU", ID: tok[1]}}
		for i, v := range vals {
			fv := FieldValue{Field: fields[i], Text: v}
			if v == "N/A" {
				fv.Blank = true
			} else if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				fv.Int = n
			} else {
				return nil, fmt.Errorf("dcgmi dmon: field %d of %s: %q is not an integer", fields[i], row.Entity.Subject(), v)
			}
			row.Values = append(row.Values, fv)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dcgmi dmon: %w", err)
	}
	return rows, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
