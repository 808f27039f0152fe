// Package ladder is the remediation ladder of one repair decision, as pure
// functions: which rungs apply to a node and its fault (Resolve), where a
// decision goes after an attempt fails (Next), whether a decision continues
// an earlier one whose fault came back within its window (StartAt), and
// what an attempt in progress has come to (Judge). The state lives on the
// Node (pkg/repair/record writes it); nothing here reads a clock or the
// API.
//
//	Draining ──drained──► rung: ResetAccelerator | Reboot ──► Remediating ──verified, healthy──► back in service
//	                      │                                      │                               (record kept for the window)
//	                      │                                      └─failed, refused, timeout──► next attempt or rung
//	                      ├─ Replace ──► Terminating (the engine replaces the node)
//	                      └─ Quarantine ──► Quarantined ──released or healthy for healthyFor──► back in service
package ladder

import (
	"time"

	corev1 "k8s.io/api/core/v1"

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
type Position = v1alpha1.RungPosition

// First is where every decision starts.
var First = Position{Rung: 0, Attempt: 1}

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
type Record = v1alpha1.LadderRecord

// StartAt is where a new decision about condition starts: after rec's
// position when rec's window is still open for the same condition,
// otherwise at the first rung. continued reports the former.
func StartAt(l []policy.Rung, rec *Record, condition corev1.NodeConditionType, now time.Time) (p Position, continued bool) {
	if rec == nil || rec.Condition != condition || !now.Before(rec.Until.Time) {
		return First, false
	}
	return Next(l, rec.RungPosition), true
}

// Attempt is the rung attempt in progress on a Node.
type Attempt = v1alpha1.RungAttempt
