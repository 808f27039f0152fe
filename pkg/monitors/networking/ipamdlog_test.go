package networking

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEvalIPAMDLog(t *testing.T) {
	ts := t0
	lines := func(ss ...string) [][]byte {
		var out [][]byte
		for _, s := range ss {
			out = append(out, []byte(strings.TrimSuffix(s, "\n")))
		}
		return out
	}
	st := evalIPAMDLog(ipamdLog{}, lines(unreachable(ts), unreachable(ts.Add(time.Minute))))
	if !st.FailingSince.Equal(ts) {
		t.Fatalf("since %v", st.FailingSince)
	}
	st = evalIPAMDLog(st, lines(`{"level":"error","ts":"2026-03-14T09:30:00.000Z","caller":"aws-k8s-agent/main.go:42","msg":"Failed to check API server connectivity: invalid configuration: no configuration has been provided"}`))
	if !st.FailingSince.Equal(ts) || !strings.Contains(st.LastError, "no configuration has been provided") {
		t.Fatalf("%+v", st)
	}
	if st = evalIPAMDLog(st, lines(connected(ts.Add(time.Hour)))); !st.FailingSince.IsZero() {
		t.Fatalf("%+v", st)
	}
	// Text, not JSON (an old plain-text log): skipped.
	if st = evalIPAMDLog(st, lines("2026-03-14T09:30:00Z [ERROR] Unable to reach API Server")); !st.FailingSince.IsZero() {
		t.Fatalf("%+v", st)
	}
}

func TestParseZapTime(t *testing.T) {
	for raw, want := range map[string]time.Time{
		`"2026-03-14T09:26:53.123Z"`:     t0.Add(123 * time.Millisecond),
		`"2026-03-14T09:26:53.123+0000"`: t0.Add(123 * time.Millisecond),
		`"2026-03-14T10:26:53+01:00"`:    t0,
		`1773480413.5`:                   t0.Add(500 * time.Millisecond),
		`"yesterday"`:                    {},
		`null`:                           {},
		`-5`:                             {},
	} {
		if got := parseZapTime(json.RawMessage(raw)); !got.Equal(want) {
			t.Errorf("%s: got %v, want %v", raw, got, want)
		}
	}
}
