package controller

import (
	"context"
	"time"

	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
)

// The breaker's part of a decision: where a node is counted (its group),
// and its place in the backlogs while a group is over its threshold.

// group is where a node is counted: its pool and its zone ("" for none).
type group struct {
	pool pool.Pool
	zone string
}

func (g group) zoneKey() string { return "zone/" + g.zone }

// keys are the breaker's names for g's pool and zone: the same strings as
// the blocked gauge's.
func (g group) keys() []string {
	if g.zone == "" {
		return []string{g.pool.String()}
	}
	return []string{g.pool.String(), g.zoneKey()}
}

// meter passes the gates' decision d for a due node through the breaker
// (pkg/repair/gate.Breaker). Over a threshold the node waits in its
// groups' backlog, due since its toleration passed; back under, the
// backlog's oldest node starts when it takes its drain slot (the slot the
// drain that follows the start then holds), the others wait their turn. A
// vetoed node leaves the backlog: it is a person's to hold, and must not
// hold the others back.
func (r *Reconciler) meter(ctx context.Context, node string, g group, trigger unhealthy.Finding, pol policy.Policy, d gate.Decision, now time.Time) gate.Decision {
	if d.Gate == gate.Veto {
		r.leaveBacklog(node)
		return d
	}
	due := trigger.Expires
	if due.IsZero() || due.After(now) {
		due = now // a person's repair-now: due from the request
	}
	return r.breaker.Admit(node, g.keys(), due, d, func() bool { return r.drainTurn(ctx, node, pol, now) })
}

// wakeHeads wakes the nodes whose turn it is in the backlogs of keys (all
// backlogs for nil): after a start, and when a drain slot frees, so that a
// backlog drains at the slots' rate rather than at its recheck interval.
func (r *Reconciler) wakeHeads(keys []string) {
	if keys == nil {
		keys = r.breaker.Groups()
	}
	for _, n := range r.breaker.Heads(keys) {
		r.enqueue(n)
	}
}
