package gate

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Metered names the breaker's hold on a repair the pool and zone gates
// allow: its group came back under its threshold with repairs that waited,
// which start one drain slot at a time, oldest first.
const Metered Gate = "Metered"

// Breaker is the memory of the pool and zone gates, so that they neither
// latch nor stampede:
//
//   - Over the threshold, a due node waits (the gate's decision, unchanged)
//     and joins its groups' backlog with the time it became due. Repairs
//     already started are not the breaker's business: they finish, and a
//     finished repair (a replaced node, a repaired one) is one unhealthy node
//     fewer, which is how a group comes back under its threshold.
//   - Back under the threshold with a backlog, repairs do not all start in
//     the same instant: the oldest due node of the backlog starts when it can
//     take a drain slot (acquire), the next when another slot frees, and a
//     node that became due meanwhile queues behind the backlog. Once the
//     backlog is empty the group decides as before: every due node the gates
//     allow starts at once, its drain taking its turn.
//
// A node leaves the backlogs when it starts, recovers, is vetoed or is gone
// (Forget). The state is memory only: a new leader starts with empty
// backlogs, so at worst the first decisions after a leader change in a
// group just under its threshold start together, bounded by the gate's own
// count as before. Safe for concurrent use.
type Breaker struct {
	mu     sync.Mutex
	groups map[string]*backlog
	// held are the waiting nodes whose last decision was a block (their
	// pool or their zone over). They keep their place in every backlog for
	// when they are let through, but hold no one back meanwhile: a node its
	// pool holds must not keep its zone's other nodes, in pools under their
	// threshold, waiting behind it for as long as its pool is over.
	held map[string]string // node → the key of the group over its threshold
}

// backlog is one group's (a pool's or a zone's) waiting nodes.
type backlog struct {
	due map[string]time.Time
}

// NewBreaker returns a breaker with no backlog.
func NewBreaker() *Breaker { return &Breaker{groups: map[string]*backlog{}, held: map[string]string{}} }

// Admit passes d, the gates' decision for node (due since due, counted in
// the groups named by keys: its pool's, then its zone's, if it has one),
// through the breaker.
// acquire takes node's drain slot (its turn to drain, held for the drain
// that follows the start); it is called only for the node whose turn it is,
// so that the slots' own queue keeps the backlog's order.
func (b *Breaker) Admit(node string, keys []string, due time.Time, d Decision, acquire func() bool) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch d.Gate {
	case Pool, Zone:
		for _, k := range keys {
			b.group(k).due[node] = due
		}
		b.held[node] = blocking(keys, d.Gate)
		d.Message += "; repairs already started go on, and the ones that waited start one drain slot at a time, oldest first, once it is back under"
		return d
	case None:
	default:
		return d // veto and pause are a person's, not the breaker's
	}
	delete(b.held, node)
	ahead, of, waitingIn := 0, 0, ""
	for _, k := range keys {
		g := b.groups[k]
		if g == nil || len(g.due) == 0 {
			continue // no backlog: the group decides as it always did
		}
		if !g.has(node) {
			g.due[node] = due
		}
		if n := g.ahead(node, k, b.held); n > ahead || waitingIn == "" {
			ahead, of, waitingIn = n, len(g.due), k
		}
	}
	if waitingIn == "" {
		return d
	}
	if ahead > 0 {
		return Decision{Gate: Metered, Message: fmt.Sprintf("%s is back under its threshold; the %d repairs that waited there start one drain slot at a time, oldest first: %d ahead of this one",
			waitingIn, of, ahead)}
	}
	if !acquire() {
		return Decision{Gate: Metered, Message: fmt.Sprintf("%s is back under its threshold; this repair waited longest of %d and starts when a drain slot frees", waitingIn, of)}
	}
	b.forgetLocked(node)
	d.Message += fmt.Sprintf("; first of the %d repairs that waited in %s, with a drain slot", of, waitingIn)
	return d
}

// Forget takes node out of every backlog: it started, recovered, was
// vetoed or is gone. An emptied backlog ends its group's metering. It
// reports whether node was waiting in one (then the heads may have
// changed).
func (b *Breaker) Forget(node string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.forgetLocked(node)
}

// Waiting is how many nodes group key's backlog holds.
func (b *Breaker) Waiting(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.groups[key]; g != nil {
		return len(g.due)
	}
	return 0
}

func (b *Breaker) forgetLocked(node string) bool {
	delete(b.held, node)
	was := false
	for k, g := range b.groups {
		if g.has(node) {
			was = true
			delete(g.due, node)
		}
		if len(g.due) == 0 {
			delete(b.groups, k)
		}
	}
	return was
}

func (b *Breaker) group(key string) *backlog {
	g := b.groups[key]
	if g == nil {
		g = &backlog{due: map[string]time.Time{}}
		b.groups[key] = g
	}
	return g
}

func (g *backlog) has(node string) bool { _, ok := g.due[node]; return ok }

// ahead counts the nodes of the backlog before node: due earlier, or at the
// same time with a smaller name (a total order, the same in every group, so
// that the oldest node of a pool and a zone is first in both), leaving out
// the ones another group holds (Breaker.held): those held by this group
// itself wait on the same threshold and keep their turn.
func (g *backlog) ahead(node, key string, held map[string]string) int {
	mine := g.due[node]
	n := 0
	for other, t := range g.due {
		if other != node && !heldElsewhere(held, other, key) && cmp.Or(t.Compare(mine), cmp.Compare(other, node)) < 0 {
			n++
		}
	}
	return n
}

// Heads are the nodes whose turn it is in the backlogs of keys: the caller
// wakes them after a start or when a drain slot frees, so that the backlog
// drains at the slots' rate rather than at its recheck interval.
func (b *Breaker) Heads(keys []string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, k := range keys {
		for _, n := range b.backlogLocked(k) {
			if heldElsewhere(b.held, n, k) {
				continue // its own gate holds it; the next one's turn
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
			break
		}
	}
	return out
}

// heldElsewhere reports whether node's last decision was a block by a group
// other than key's.
func heldElsewhere(held map[string]string, node, key string) bool {
	by, ok := held[node]
	return ok && by != key
}

// blocking is the key of the group whose gate blocked: keys are the node's
// pool's, then its zone's (Admit).
func blocking(keys []string, g Gate) string {
	if g == Zone && len(keys) > 1 {
		return keys[1]
	}
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// Groups are the keys of the groups that have a backlog now, sorted.
func (b *Breaker) Groups() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.groups))
	for k := range b.groups {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Backlog is group key's waiting nodes, oldest first (for status and tests).
func (b *Breaker) Backlog(key string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.backlogLocked(key)
}

func (b *Breaker) backlogLocked(key string) []string {
	g := b.groups[key]
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.due))
	for n := range g.due {
		out = append(out, n)
	}
	slices.SortFunc(out, func(x, y string) int { return cmp.Or(g.due[x].Compare(g.due[y]), cmp.Compare(x, y)) })
	return out
}
