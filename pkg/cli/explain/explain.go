// Package explain names the cause of a pending pod, a node that will not
// become ready, consolidate or be repaired, or a NodePool that does not
// launch, and the fix. It is pure: rules take objects and events (as the
// scheduler, kubelet, Karpenter and nodemend write them) and return
// findings; the plugin gathers the inputs.
package explain

import (
	"slices"
	"strings"
)

// Finding is one cause, with what shows it and what to do.
type Finding struct {
	// Cause says what is wrong, in one line.
	Cause string `json:"cause"`
	// Fix says what to do.
	Fix string `json:"fix"`
	// Evidence is what was read: event messages verbatim, object fields.
	Evidence []string `json:"evidence,omitempty"`
	// Source is who reported it: default-scheduler, karpenter, kubelet,
	// nodemend-controller, or the object read ("pod status", "node").
	Source string `json:"source"`
	// Blocking findings prevent progress; the others are context.
	Blocking bool `json:"blocking"`
}

// Report is the explanation of one object.
type Report struct {
	Object   string    `json:"object"`
	Summary  string    `json:"summary"`
	Findings []Finding `json:"findings"`
}

// sortFindings puts blocking findings first, keeping rule order otherwise.
func sortFindings(fs []Finding) []Finding {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		switch {
		case a.Blocking == b.Blocking:
			return 0
		case a.Blocking:
			return -1
		}
		return 1
	})
	return fs
}

// containsAny reports whether s contains any of subs, case-insensitively.
func containsAny(s string, subs ...string) bool {
	ls := strings.ToLower(s)
	for _, sub := range subs {
		if strings.Contains(ls, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}
