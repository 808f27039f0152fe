package exporter

import (
	"slices"

	"nodemend.dev/nodemend/pkg/health"
)

// FaultSubjects are the distinct subjects of condition t's active faults for
// which keep(reason, subject) holds, sorted. The agent's side of the ladder
// reads which devices it repairs from them (the GPUs a reset resolves).
func (e *Exporter) FaultSubjects(t health.ConditionType, keep func(reason, subject string) bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k := range e.book.cond(t).faults {
		if keep(k.reason, k.subject) && !slices.Contains(out, k.subject) {
			out = append(out, k.subject)
		}
	}
	slices.Sort(out)
	return out
}

// ClearFaults drops condition t's active faults for which drop(reason,
// subject) holds, once a repair on this node resolved them, and writes the
// conditions again. A check that still sees its fault reports it again.
func (e *Exporter) ClearFaults(t health.ConditionType, drop func(reason, subject string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.book.cond(t)
	cleared := false
	for k := range c.faults {
		if drop(k.reason, k.subject) {
			delete(c.faults, k)
			cleared = true
		}
	}
	if cleared {
		e.markDirtyLocked()
	}
}
