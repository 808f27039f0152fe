package logline

// Rule maps log lines to a reason code.
type Rule struct {
	// Reason is the registry reason a match reports.
	Reason string
	// Sources restricts the rule to lines these readers produce; empty means
	// any.
	Sources []Source
	// Accept is who may have written a line the rule reports: a line whose
	// writer is none of these is no evidence and is dropped (counted, never
	// a finding). Required: every rule says whom it believes.
	Accept []Provenance
	// Contains are literals that must all occur in the line. At least one is
	// required: it is the prefilter that keeps non-matching lines cheap.
	Contains []string
	// Pattern is an optional RE2 expression tried after the prefilter. Named
	// groups are captured for Message and for the monitor.
	Pattern string
	// Exclude are literals that veto a match (e.g. a pod's own cgroup path).
	Exclude []string
	// Message is the finding message; ${name} expands to the named group. Empty
	// means the line itself.
	Message string
}

// Match is a line that a rule matched.
type Match struct {
	Reason  string
	Message string
	// Groups holds the named groups of Pattern, nil when it has none.
	Groups map[string]string
	Line   Line
}
