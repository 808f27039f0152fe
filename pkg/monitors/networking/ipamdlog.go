package networking

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// ipamdLog is what the IPAMD log says about API server connectivity.
type ipamdLog struct {
	// FailingSince is the time of the first failure line not followed by a
	// successful connection; zero when connected (or unknown).
	FailingSince time.Time
	LastError    string
	// Starts are the times of IPAMD's start lines within the last
	// restartWindow of the newest one.
	Starts []time.Time
	// NoIPs is the last "no address" message of the latest read; it is
	// cleared by each read (a new check).
	NoIPs string
}

// restartWindow is the window IPAMDRepeatedlyRestart counts starts in.
const restartWindow = time.Hour

// Messages of the VPC CNI (pkg/k8sapi CheckAPIServerConnectivity and
// cmd/aws-k8s-agent): a failed connectivity test, and the line that follows
// a successful one.
var (
	ipamdFailures = []string{"Unable to reach API Server", "Failed to check API server connectivity", "error communicating with apiserver"}
	ipamdSuccess  = "Successful communication with the Cluster"
	// ipamdStart begins every IPAMD run (cmd/aws-k8s-agent/main.go:
	// "Starting L-IPAMD %s  ...").
	ipamdStart = "Starting L-IPAMD"
	// ipamdNoIPs are IPAMD's messages when it has no address for a pod:
	// EC2's error code when the subnet has no free address for a new ENI
	// or secondary IP, and the datastore's own (pkg/ipamd/datastore).
	ipamdNoIPs = []string{"InsufficientFreeAddressesInSubnet", "no available IP/Prefix addresses"}
)

// evalIPAMDLog advances st with new log lines (oldest first).
func evalIPAMDLog(st ipamdLog, lines [][]byte) ipamdLog {
	st.NoIPs = ""
	for _, line := range lines {
		ts, msg, ok := parseIPAMDLine(line)
		if !ok {
			continue
		}
		switch {
		case strings.Contains(msg, ipamdStart):
			if ts.IsZero() {
				continue // a start we cannot place in the window
			}
			st.Starts = append(slices.DeleteFunc(st.Starts, func(t time.Time) bool { return ts.Sub(t) > restartWindow }), ts)
		case slices.ContainsFunc(ipamdNoIPs, func(f string) bool { return strings.Contains(msg, f) }):
			st.NoIPs = msg
		case strings.Contains(msg, ipamdSuccess):
			st.FailingSince, st.LastError = time.Time{}, ""
		case slices.ContainsFunc(ipamdFailures, func(f string) bool { return strings.Contains(msg, f) }):
			if st.FailingSince.IsZero() {
				st.FailingSince = ts
			}
			st.LastError = msg
		}
	}
	return st
}

// parseIPAMDLine reads one line of ipamd.log, zap's JSON encoding:
//
//	{"level":"error","ts":"2024-11-21T19:12:29.123Z","caller":"k8sapi/k8sutils.go:71","msg":"Unable to reach API Server, ..."}
//
// Lines that mention neither a failure nor a success are skipped before any
// JSON decoding: the log is busy and almost every line is about IPs.
func parseIPAMDLine(line []byte) (time.Time, string, bool) {
	return parseZapLine(line, ipamdLiterals)
}

// ipamdLiterals are every message the IPAMD log is read for.
var ipamdLiterals = slices.Concat([]string{ipamdSuccess, ipamdStart}, ipamdFailures, ipamdNoIPs)

// decodeZap reads the time and message of a zap JSON line.
func decodeZap(line []byte) (time.Time, string, bool) {
	var rec struct {
		TS  json.RawMessage `json:"ts"`
		Msg string          `json:"msg"`
	}
	if err := json.Unmarshal(line, &rec); err != nil || rec.Msg == "" {
		return time.Time{}, "", false
	}
	return parseZapTime(rec.TS), rec.Msg, true
}

// parseZapTime reads zap's "ts": an ISO 8601 string (the VPC CNI's
// encoder) or epoch seconds as a number (zap's default). Unknown is zero.
func parseZapTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700", "2006-01-02T15:04:05Z0700"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t
			}
		}
		return time.Time{}
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil && f > 0 && f < 1e11 {
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC()
	}
	return time.Time{}
}
