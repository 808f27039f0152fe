package gate_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/slots"
)

// storm simulates one pool of the controller minute by minute: nodes become
// due (their toleration passed), each due node's repair is decided by the
// gates and the breaker as the controller does, a started repair takes a
// drain slot (2 at once) and is done three minutes after it got one (the
// node replaced, healthy), and nodes whose fault was transient recover by
// themselves. The clock is the loop's: no sleeps.
type storm struct {
	t0      time.Time
	size    int
	limit   intstr.IntOrString
	breaker *gate.Breaker
	slots   *slots.Slots
	nodes   map[string]*simNode
	now     time.Time
	// log of what happened, for the failure message.
	log []string
	// started are the nodes whose repair started, in order.
	started []string
}

type simNode struct {
	due       time.Time // zero: healthy
	repairing bool
	drainEnds time.Time // zero: no slot yet
	done      bool
}

const poolKey = "pool/gpu"

func (s *storm) unhealthy() int {
	n := 0
	for _, sn := range s.nodes {
		if !sn.done && (sn.repairing || !sn.due.IsZero()) {
			n++
		}
	}
	return n
}

func (s *storm) fault(name string, due time.Time) {
	s.nodes[name] = &simNode{due: due}
}

func (s *storm) recover(name string) {
	sn := s.nodes[name]
	if sn.repairing {
		panic("a repair that started is finished, not recovered")
	}
	sn.due = time.Time{}
	s.breaker.Forget(name)
	s.slots.Release(name)
	s.log = append(s.log, fmt.Sprintf("%s %s recovered by itself", s.stamp(), name))
}

func (s *storm) stamp() string { return "t+" + s.now.Sub(s.t0).String() }

// minute advances the clock a minute and runs the pool: drains end and take
// turns, then every due node not under repair is decided, in name order
// (not due order: the breaker must order them itself). It returns how many
// repairs started, and whether the pool was over its threshold before the
// decisions.
func (s *storm) minute() (started int, over bool) {
	s.now = s.now.Add(time.Minute)
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sn := s.nodes[n]
		if sn.repairing && !sn.drainEnds.IsZero() && !s.now.Before(sn.drainEnds) {
			sn.repairing, sn.done, sn.due = false, true, time.Time{}
			s.slots.Release(n)
			s.log = append(s.log, fmt.Sprintf("%s %s repaired", s.stamp(), n))
		}
	}
	for _, n := range names {
		if sn := s.nodes[n]; sn.repairing && sn.drainEnds.IsZero() {
			if ok, _ := s.slots.Acquire(n, "gpu", 0); ok {
				sn.drainEnds = s.now.Add(3 * time.Minute)
			}
		}
	}
	allowed, _ := gate.MaxAllowed(s.limit, s.size)
	over = s.unhealthy() > allowed
	// Every due node is decided, in name order; then, as the controller
	// wakes the backlog's head after a start, the heads again until none
	// starts.
	queue := names
	for len(queue) > 0 {
		var again []string
		for _, n := range queue {
			if s.decide(n) {
				started++
				again = append(again, s.breaker.Heads([]string{poolKey})...)
			}
		}
		queue = again
	}
	return started, over
}

// decide decides a due node not under repair, as the controller does, and
// starts its repair if allowed.
func (s *storm) decide(n string) bool {
	sn := s.nodes[n]
	if sn.done || sn.repairing || sn.due.IsZero() || s.now.Before(sn.due) {
		return false
	}
	d := gate.Decide(gate.Input{MaxUnhealthy: s.limit, Pool: gate.Group{Name: "gpu", Size: s.size, Unhealthy: s.unhealthy()}})
	d = s.breaker.Admit(n, []string{poolKey}, sn.due, d, func() bool { ok, _ := s.slots.Acquire(n, "gpu", 0); return ok })
	if !d.Allowed {
		return false
	}
	s.breaker.Forget(n)
	sn.repairing = true
	if ok, _ := s.slots.Acquire(n, "gpu", 0); ok {
		sn.drainEnds = s.now.Add(3 * time.Minute)
	}
	s.started = append(s.started, n)
	s.log = append(s.log, fmt.Sprintf("%s %s started (%s)", s.stamp(), n, d.Message))
	return true
}

// A storm crosses the pool's threshold twice, each time both ways. While
// over, no repair starts, and the repairs started before go on and finish;
// back under, the repairs that waited start one drain slot at a time, oldest
// first, never more at once than there are slots — where the gates alone
// would have started them all in the same minute. Faults that stay are all
// repaired in the end, and the breaker's backlog is empty again.
func TestBreakerStormCrossesTheThresholdBothWays(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &storm{t0: t0, now: t0, size: 20, limit: intstr.FromString("20%"), breaker: gate.NewBreaker(), slots: slots.New(2), nodes: map[string]*simNode{}}
	for i := range 20 {
		s.nodes[fmt.Sprintf("n%02d", i)] = &simNode{}
	}
	at := func(m int, sec int) time.Time {
		return t0.Add(time.Duration(m)*time.Minute + time.Duration(sec)*time.Second)
	}
	defer func() {
		if t.Failed() {
			t.Log("\n" + strings.Join(s.log, "\n"))
		}
	}()

	// Minute 1: three nodes due, under the threshold (4 of 20): all three
	// start at once, as the gates decide without a backlog; their drains
	// take turns.
	for _, n := range []string{"n00", "n01", "n02"} {
		s.fault(n, at(1, 0))
	}
	if started, over := s.minute(); started != 3 || over {
		t.Fatalf("minute 1: %d started (over %v), want the 3 due under the threshold", started, over)
	}
	// Minute 2: a storm, six more due (due times in the reverse of name
	// order): 9 unhealthy, over the threshold. The early ones were due
	// before the 3 started ones finish.
	storm1 := []string{"n03", "n04", "n05", "n06", "n07", "n08"}
	for i, n := range storm1 {
		s.fault(n, at(2, -10*i))
	}
	overMinutes, startedWhileOver := 0, 0
	for range 8 { // minutes 2..9: over, the started repairs finish
		started, over := s.minute()
		if over {
			overMinutes++
			startedWhileOver += started
		}
	}
	if overMinutes == 0 || startedWhileOver != 0 {
		t.Fatalf("over the threshold %d minutes, %d repairs started meanwhile; want over, none", overMinutes, startedWhileOver)
	}
	for _, n := range []string{"n00", "n01", "n02"} {
		if !s.nodes[n].done {
			t.Errorf("%s, started before the storm, did not finish while the pool was over its threshold", n)
		}
	}
	if got := s.breaker.Backlog(poolKey); !slices.Equal(got, []string{"n08", "n07", "n06", "n05", "n04", "n03"}) {
		t.Fatalf("backlog %v, want the storm's nodes oldest first", got)
	}

	// Minute 10: three of the storm's faults were transient: 3 unhealthy,
	// back under. The gates alone would start all three now; the breaker
	// starts the oldest with each drain slot.
	for _, n := range []string{"n03", "n05", "n07"} {
		s.recover(n)
	}
	gatesAlone := 0
	for _, n := range []string{"n04", "n06", "n08"} {
		_ = n
		if gate.Decide(gate.Input{MaxUnhealthy: s.limit, Pool: gate.Group{Name: "gpu", Size: s.size, Unhealthy: s.unhealthy()}}).Allowed {
			gatesAlone++
		}
	}
	if gatesAlone != 3 {
		t.Fatalf("the gates alone would start %d at once; the scenario needs a stampede to prevent", gatesAlone)
	}
	started, over := s.minute()
	if over || started != 2 {
		t.Fatalf("minute 10: %d started (over %v), want the two oldest, one per free drain slot", started, over)
	}
	if !slices.Equal(s.started[3:], []string{"n08", "n06"}) {
		t.Fatalf("started %v after the storm, want oldest first: n08, n06", s.started[3:])
	}

	// Minute 11: a second wave, five more due: over again. The two metered
	// repairs that started go on; n04 (still waiting) and the wave wait.
	wave := []string{"n10", "n11", "n12", "n13", "n14"}
	for _, n := range wave {
		s.fault(n, at(11, 0))
	}
	for range 6 { // minutes 11..16
		started, over := s.minute()
		if over && started > 0 {
			t.Fatalf("%s: %d started while over the threshold", s.stamp(), started)
		}
	}
	if !s.nodes["n08"].done || !s.nodes["n06"].done {
		t.Fatal("the metered repairs did not finish while the pool was over its threshold again")
	}
	// Minute 17: the wave was a false alarm but for n10: under again.
	for _, n := range []string{"n11", "n12", "n13", "n14"} {
		s.recover(n)
	}
	maxRepairing := 0
	for range 12 {
		started, over := s.minute()
		if over && started > 0 {
			t.Fatalf("%s: %d started while over the threshold", s.stamp(), started)
		}
		repairing := 0
		for _, sn := range s.nodes {
			if sn.repairing {
				repairing++
			}
		}
		maxRepairing = max(maxRepairing, repairing)
	}
	if maxRepairing > 2 {
		t.Errorf("%d repairs under way at once after the second clearing, more than the 2 drain slots", maxRepairing)
	}
	// n04 waited since the first storm: it starts before n10.
	if i, j := slices.Index(s.started, "n04"), slices.Index(s.started, "n10"); i < 0 || j < 0 || i > j {
		t.Errorf("start order %v: n04 (due at minute 2) must start before n10 (due at minute 11)", s.started)
	}
	for n, sn := range s.nodes {
		if !sn.due.IsZero() && !sn.done {
			t.Errorf("%s still unhealthy and unrepaired at the end", n)
		}
	}
	if s.breaker.Waiting(poolKey) != 0 {
		t.Errorf("backlog %v at the end, want none (the group decides as before)", s.breaker.Backlog(poolKey))
	}
	// Back to normal: two nodes due together both start in the same minute.
	s.fault("n15", s.now.Add(time.Minute))
	s.fault("n16", s.now.Add(time.Minute))
	if started, _ := s.minute(); started != 2 {
		t.Errorf("after the backlog emptied, %d of 2 due nodes started at once", started)
	}
}

// A veto or the pause switch is a person's decision: the breaker passes it
// through and does not queue the node.
func TestBreakerLeavesVetoAndPauseAlone(t *testing.T) {
	b := gate.NewBreaker()
	d := b.Admit("n1", []string{poolKey}, time.Unix(0, 0), gate.Decision{Gate: gate.Pause, Message: "paused"}, func() bool { t.Fatal("acquire called"); return false })
	if d.Gate != gate.Pause || b.Waiting(poolKey) != 0 {
		t.Fatalf("%+v, backlog %d", d, b.Waiting(poolKey))
	}
}

// The oldest node of a pool and a zone is first in both: a node waiting in
// both starts only when it is first in each, and the order is the same.
func TestBreakerPoolAndZoneAgree(t *testing.T) {
	b := gate.NewBreaker()
	over := gate.Decision{Gate: gate.Pool, Message: "pool p over"}
	t0 := time.Unix(1000, 0)
	b.Admit("a", []string{"pool/p", "zone/z1"}, t0, over, nil)
	b.Admit("b", []string{"pool/p", "zone/z2"}, t0.Add(time.Second), over, nil)
	b.Admit("c", []string{"pool/p", "zone/z1"}, t0.Add(2*time.Second), over, nil)
	ok := gate.Decision{Allowed: true, Message: "ok"}
	yes := func() bool { return true }
	if d := b.Admit("c", []string{"pool/p", "zone/z1"}, t0.Add(2*time.Second), ok, yes); d.Allowed || d.Gate != gate.Metered || !strings.Contains(d.Message, "2 ahead") {
		t.Fatalf("c: %+v", d)
	}
	if d := b.Admit("a", []string{"pool/p", "zone/z1"}, t0, ok, yes); !d.Allowed {
		t.Fatalf("a, the oldest: %+v", d)
	}
	if d := b.Admit("b", []string{"pool/p", "zone/z2"}, t0.Add(time.Second), ok, func() bool { return false }); d.Allowed || !strings.Contains(d.Message, "starts when a drain slot frees") {
		t.Fatalf("b without a slot: %+v", d)
	}
	if got := b.Backlog("pool/p"); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("pool backlog %v", got)
	}
	b.Forget("b")
	b.Forget("c")
	if b.Waiting("pool/p") != 0 || b.Waiting("zone/z1") != 0 {
		t.Fatal("backlogs not emptied")
	}
}

// A node its own pool holds keeps no one else waiting: s waits in its
// pool's and its zone's backlogs while pool p is over, and g, due later in
// the same zone but in a pool under its threshold, starts (with a drain
// slot) instead of waiting behind s for as long as p stays over. s keeps
// its place: once p is back under, it is ahead of a node of p due after it.
func TestBreakerANodeHeldByItsPoolHoldsNoOneInItsZone(t *testing.T) {
	b := gate.NewBreaker()
	t0 := time.Unix(1000, 0)
	yes := func() bool { return true }
	ok := gate.Decision{Allowed: true, Message: "ok"}
	// Zone z was over: g waited there, and s too.
	zoneOver := gate.Decision{Gate: gate.Zone, Message: "zone z over"}
	b.Admit("s", []string{"pool/p", "zone/z"}, t0, zoneOver, nil)
	b.Admit("g", []string{"pool/q", "zone/z"}, t0.Add(time.Second), zoneOver, nil)
	// Zone z back under, pool p now over: s is held by its pool.
	b.Admit("s", []string{"pool/p", "zone/z"}, t0, gate.Decision{Gate: gate.Pool, Message: "pool p over"}, nil)
	if got := b.Heads([]string{"pool/q", "zone/z"}); !slices.Equal(got, []string{"g"}) {
		t.Errorf("heads %v, want [g]: s is not the one to wake while its pool holds it", got)
	}
	if d := b.Admit("g", []string{"pool/q", "zone/z"}, t0.Add(time.Second), ok, yes); !d.Allowed {
		t.Fatalf("g waits behind a node its pool holds: %+v", d)
	}
	// p back under: s first, before a node of p due after it.
	b.Admit("n", []string{"pool/p", "zone/z"}, t0.Add(time.Minute), gate.Decision{Gate: gate.Pool, Message: "pool p over"}, nil)
	if d := b.Admit("n", []string{"pool/p", "zone/z"}, t0.Add(time.Minute), ok, yes); d.Allowed || !strings.Contains(d.Message, "1 ahead") {
		t.Fatalf("n, due after s: %+v", d)
	}
	if d := b.Admit("s", []string{"pool/p", "zone/z"}, t0, ok, yes); !d.Allowed {
		t.Fatalf("s, the oldest, once its pool is under: %+v", d)
	}
}
