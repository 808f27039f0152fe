package slots

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestTotalBoundFirstComeFirstServed(t *testing.T) {
	s := New(2)
	l := 0
	for i, want := range []bool{true, true, false, false} {
		if ok, _ := s.Acquire(fmt.Sprint("n", i), "p", l); ok != want {
			t.Fatalf("n%d: acquired %v, want %v", i, ok, want)
		}
	}
	if ok, _ := s.Acquire("n0", "p", l); !ok {
		t.Fatal("a held slot must stay held")
	}
	if ok, _ := s.Acquire("n3", "p", l); ok {
		t.Fatal("n3 overtook n2")
	}
	if woken := s.Release("n0"); !slices.Equal(woken, []string{"n2"}) {
		t.Fatalf("woken %v, want n2 (first in line)", woken)
	}
	if ok, _ := s.Acquire("n2", "p", l); !ok {
		t.Fatal("n2 was handed a slot")
	}
	if s.Draining() != 2 || s.Waiting() != 1 {
		t.Fatalf("draining %d waiting %d", s.Draining(), s.Waiting())
	}
	// A node that leaves the line (its repair ended) frees its place.
	if woken := s.Release("n3"); len(woken) != 0 || s.Waiting() != 0 {
		t.Fatalf("woken %v, waiting %d", woken, s.Waiting())
	}
}

func TestAFullGroupDoesNotHoldBackOthers(t *testing.T) {
	s := New(10)
	gpu, cpu := 1, 0
	if ok, _ := s.Acquire("g0", "gpu", gpu); !ok {
		t.Fatal("g0")
	}
	if ok, _ := s.Acquire("g1", "gpu", gpu); ok {
		t.Fatal("g1 beyond its policy's bound")
	}
	if ok, _ := s.Acquire("c0", "cpu", cpu); !ok {
		t.Fatal("c0 held back by another policy's full group")
	}
	if woken := s.Release("g0"); !slices.Equal(woken, []string{"g1"}) {
		t.Fatalf("woken %v", woken)
	}
}

func TestRaisedBoundServesWaitersInOrder(t *testing.T) {
	s := New(0)
	for _, n := range []string{"a", "b", "c"} {
		s.Acquire(n, "p", 1)
	}
	ok, woken := s.Acquire("c", "p", 3)
	if !ok || !slices.Equal(woken, []string{"b"}) {
		t.Fatalf("ok %v woken %v: b is before c and fits now", ok, woken)
	}
}

func TestUnbounded(t *testing.T) {
	s := New(0)
	for i := range 100 {
		if ok, _ := s.Acquire(fmt.Sprint(i), "p", 0); !ok {
			t.Fatal(i)
		}
	}
}

// Concurrent acquires never exceed the bound.
func TestConcurrentNeverExceeds(t *testing.T) {
	s := New(5)
	l := 0
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fmt.Sprint(i)
			if ok, _ := s.Acquire(n, "p", l); ok {
				if d := s.Draining(); d > 5 {
					t.Errorf("%d draining", d)
				}
			}
			s.Release(n)
		}()
	}
	wg.Wait()
	if s.Draining() > 0 || s.Waiting() > 0 {
		t.Fatalf("draining %d, waiting %d after every node left", s.Draining(), s.Waiting())
	}
}
