// Package ladder is the remediation ladder of one repair decision, as pure
// functions: which rungs apply to a node and its fault (Resolve), where a
// decision goes after an attempt fails (Next), whether a decision continues
// an earlier one whose fault came back within its window (StartAt), and
// what an attempt in progress has come to (Judge). The state lives on the
// Node (pkg/repair/workflow writes it); nothing here reads a clock or the
// API.
//
//	Draining ──drained──► rung: ResetAccelerator | Reboot ──► Remediating ──verified, healthy──► back in service
//	                      │                                      │                               (record kept for the window)
//	                      │                                      └─failed, refused, timeout──► next attempt or rung
//	                      ├─ Replace ──► Terminating (the engine replaces the node)
//	                      └─ Quarantine ──► Quarantined ──released or healthy for healthyFor──► back in service
package ladder

import (
	"encoding/json"
	"fmt"
	"time"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/policy"
)

// Resolve is the ladder of a node under pol for a fault with the given
// condition reason. A policy's own ladder is used as written; the default
// is [Replace] where an engine owns the node (as before the ladder existed),
// otherwise it starts at the remedy the vendor's catalogue names for the
// reason (the registry's remedy, docs/accelerators.md): ResetAccelerator,
// Reboot, Quarantine for a GPU reset; Reboot, Quarantine for a reboot or no
// known remedy; Quarantine alone for hardware only a person can fix, where a
// reset or a reboot would only bring a broken node back to work for a while.
// A ladder that does not end in Replace or Quarantine ends in Quarantine: a
// node whose fault every rung failed to fix goes to a person, never back to
// work.
func Resolve(pol policy.Policy, engineOwned bool, reason string) []policy.Rung {
	l := pol.Ladder
	if l == nil {
		switch rm := health.CatalogueRemedy(reason); {
		case engineOwned:
			l = []policy.Rung{policy.NewRung(v1alpha1.LadderReplace)}
		case rm == health.RemedyResetGPU:
			l = []policy.Rung{policy.NewRung(v1alpha1.LadderResetAccelerator), policy.NewRung(v1alpha1.LadderReboot)}
		case rm == health.RemedyReplaceHardware:
			l = []policy.Rung{}
		default:
			l = []policy.Rung{policy.NewRung(v1alpha1.LadderReboot)}
		}
	}
	if len(l) == 0 || !l[len(l)-1].Terminal() {
		l = append(append([]policy.Rung(nil), l...), policy.NewRung(v1alpha1.LadderQuarantine))
	}
	return l
}

// Position is where a decision stands: the rung (from 0) and the attempt
// of that rung (from 1).
type Position struct {
	Rung    int `json:"rung"`
	Attempt int `json:"attempt"`
}

// First is where every decision starts.
var First = Position{Rung: 0, Attempt: 1}

// String is "rung 1 (Reboot), attempt 2 of 3" for notes.
func (p Position) String() string { return fmt.Sprintf("rung %d, attempt %d", p.Rung+1, p.Attempt) }

// Next is the position after the attempt at p failed: the rung's next
// attempt, or the next rung's first. A Resolve'd ladder ends in a terminal
// rung, which is never left; p beyond the ladder (the policy changed) goes
// to its last rung.
func Next(l []policy.Rung, p Position) Position {
	if p.Rung >= len(l) {
		return Position{Rung: len(l) - 1, Attempt: 1}
	}
	if p.Attempt < l[p.Rung].Attempts {
		return Position{Rung: p.Rung, Attempt: p.Attempt + 1}
	}
	if p.Rung+1 < len(l) {
		return Position{Rung: p.Rung + 1, Attempt: 1}
	}
	return Position{Rung: len(l) - 1, Attempt: 1}
}

// At is the rung at p (the last when the ladder has become shorter).
func At(l []policy.Rung, p Position) policy.Rung {
	if p.Rung >= len(l) {
		return l[len(l)-1]
	}
	return l[p.Rung]
}

// Record is what is kept on a Node after an attempt returned it to
// service, until its window ends: the same condition unhealthy again
// before Until continues the ladder after Position instead of starting
// over.
type Record struct {
	Position
	Action    v1alpha1.LadderAction `json:"action"`
	Condition string                `json:"condition"`
	Returned  time.Time             `json:"returned"`
	Until     time.Time             `json:"until"`
}

// StartAt is where a new decision about condition starts: after rec's
// position when rec's window is still open for the same condition,
// otherwise at the first rung. continued reports the former.
func StartAt(l []policy.Rung, rec *Record, condition string, now time.Time) (p Position, continued bool) {
	if rec == nil || rec.Condition != condition || !now.Before(rec.Until) {
		return First, false
	}
	return Next(l, rec.Position), true
}

// Attempt is the rung attempt in progress on a Node.
type Attempt struct {
	Position
	Action v1alpha1.LadderAction `json:"action"`
	// Of is how many attempts the rung has.
	Of int `json:"of"`
	// Order is the NodeRemediation of this attempt (ResetAccelerator,
	// Reboot); its name is derived from the decision, so that it is created
	// once however often the controller restarts.
	Order string `json:"order,omitempty"`
	// BootID is the Node's boot when the attempt was decided.
	BootID string `json:"bootID,omitempty"`
	// Started is when the attempt was decided; it fails at Started+Timeout.
	Started time.Time `json:"started"`
	Timeout string    `json:"timeout,omitempty"`
	// Verified is when the controller first saw the new boot ID (Reboot).
	Verified time.Time `json:"verified,omitzero"`
}

// Deadline is when the attempt has failed if it has not succeeded.
func (a Attempt) Deadline() time.Time {
	d, _ := time.ParseDuration(a.Timeout)
	return a.Started.Add(d)
}

// Encode is the annotation form of v (an Attempt or a Record).
func Encode(v any) string {
	b, _ := json.Marshal(v) // plain fields: cannot fail
	return string(b)
}

// DecodeAttempt reads an Attempt annotation.
func DecodeAttempt(s string) (*Attempt, error) {
	a := &Attempt{}
	if err := json.Unmarshal([]byte(s), a); err != nil {
		return nil, fmt.Errorf("parsing ladder attempt %q: %w", s, err)
	}
	if a.Action == "" || a.Attempt < 1 || a.Rung < 0 || a.Started.IsZero() {
		return nil, fmt.Errorf("ladder attempt %q lacks its action, position or start", s)
	}
	if _, err := time.ParseDuration(a.Timeout); a.Timeout != "" && err != nil {
		return nil, fmt.Errorf("ladder attempt %q: timeout: %w", s, err)
	}
	return a, nil
}

// DecodeRecord reads a Record annotation.
func DecodeRecord(s string) (*Record, error) {
	r := &Record{}
	if err := json.Unmarshal([]byte(s), r); err != nil {
		return nil, fmt.Errorf("parsing ladder record %q: %w", s, err)
	}
	if r.Condition == "" || r.Attempt < 1 || r.Until.IsZero() {
		return nil, fmt.Errorf("ladder record %q lacks its condition, position or window", s)
	}
	return r, nil
}
