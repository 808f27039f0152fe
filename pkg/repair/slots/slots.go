// Package slots bounds how many repairs drain at once. A storm taints every
// due node at once (the decision: the pool gate bounds how many), but
// draining them all at once would move every pod of a fifth of a pool in one
// burst; the drains take turns instead, in the order the repairs started.
//
// The state is memory only: a new leader rebuilds it from the nodes it finds
// in the draining phase, in whatever order it reconciles them. That can
// reorder the queue after a leader change, never exceed the bound.
package slots

import (
	"slices"
	"sync"
)

// Slots is safe for concurrent use.
type Slots struct {
	// total bounds all drains; 0: unbounded.
	total int
	mu    sync.Mutex
	// bound is each group's own bound (0: none), as last given.
	bound map[string]int
	// held: node → group of the slot it holds.
	held  map[string]string
	count map[string]int
	// waiting: nodes refused a slot, first come first served.
	waiting []waiter
}

type waiter struct{ node, group string }

// New returns empty slots for at most total drains at once (0: no bound
// but the groups').
func New(total int) *Slots {
	return &Slots{total: total, bound: map[string]int{}, held: map[string]string{}, count: map[string]int{}}
}

// Acquire reports whether node may drain now: it holds a slot, or it got
// one now, in its turn. A node refused is queued; Release hands it its slot
// when its turn comes. groupBound is the bound of the node's group (its
// policy's, 0 for none); a change applies to the whole group. Woken are
// other waiting nodes that got a slot now (a bound was raised): the caller
// wakes them.
func (s *Slots) Acquire(node, group string, groupBound int) (ok bool, woken []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bound[group] = groupBound
	if _, ok := s.held[node]; ok {
		return true, nil
	}
	if !slices.ContainsFunc(s.waiting, func(w waiter) bool { return w.node == node }) {
		s.waiting = append(s.waiting, waiter{node: node, group: group})
	}
	for _, n := range s.fill() {
		if n == node {
			ok = true
		} else {
			woken = append(woken, n)
		}
	}
	return ok, woken
}

// Release frees node's slot (its drain finished, or its repair ended or
// was vetoed) and forgets it if it was waiting. It returns the nodes
// that now hold a slot they waited for: the caller wakes them.
func (s *Slots) Release(node string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.held[node]; ok {
		delete(s.held, node)
		s.count[g]--
		if s.count[g] == 0 {
			delete(s.count, g)
		}
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(w waiter) bool { return w.node == node })
	return s.fill()
}

// fill hands free slots to the waiters in turn and returns those served.
func (s *Slots) fill() []string {
	var served []string
	for {
		i := s.firstFitting()
		if i < 0 {
			return served
		}
		w := s.waiting[i]
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.held[w.node] = w.group
		s.count[w.group]++
		served = append(served, w.node)
	}
}

// Has reports whether node holds a slot or waits for one.
func (s *Slots) Has(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held := s.held[node]
	return held || slices.ContainsFunc(s.waiting, func(w waiter) bool { return w.node == node })
}

// Draining is the number of slots held.
func (s *Slots) Draining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Waiting is the number of nodes waiting for a slot.
func (s *Slots) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// firstFitting is the index of the first waiter a slot can go to, -1 for
// none. A waiter whose group is full does not hold back other groups.
func (s *Slots) firstFitting() int {
	if s.total > 0 && len(s.held) >= s.total {
		return -1
	}
	for i, w := range s.waiting {
		if b := s.bound[w.group]; b == 0 || s.count[w.group] < b {
			return i
		}
	}
	return -1
}
