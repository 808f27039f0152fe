package events

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/internal/testsupport/testenv"
)

var (
	client kubernetes.Interface
	sink   *coreclient.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(env *testenv.Env) error {
		client = env.Client
		var err error
		sink, err = coreclient.New(env.Config)
		return err
	})
}

var nodeSeq atomic.Int32

type harness struct {
	t     *testing.T
	node  string
	ref   *corev1.ObjectReference
	clock *clocktesting.FakeClock
	rec   *Recorder
}

func start(t *testing.T, burst int) *harness {
	t.Helper()
	node := fmt.Sprintf("events-node-%d", nodeSeq.Add(1))
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rec := New(Options{Sink: sink, Source: corev1.EventSource{Component: "nodemend-agent", Host: node}, Clock: clk, Log: testr.New(t), Burst: burst})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rec.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &harness{t: t, node: node, clock: clk, rec: rec,
		ref: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}}
}

// events lists the Events about the harness's node once the writer has
// written want writes in all (creates plus repeats), sorted by first time.
func (h *harness) events(wantCount int) []corev1.Event {
	h.t.Helper()
	var items []corev1.Event
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", h.node).String()})
		if err != nil {
			h.t.Fatal(err)
		}
		items = l.Items
		total := 0
		for _, e := range items {
			total += int(e.Count)
		}
		if total == wantCount {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("want %d writes in all, have %d: %+v", wantCount, total, items)
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	return items
}

// settle waits until the queue is drained and the last write is done: the
// next event of a fresh reason is visible.
func (h *harness) settle(prior int) {
	h.t.Helper()
	h.rec.Event(h.ref, corev1.EventTypeNormal, "Settle", fmt.Sprintf("settle %d", prior))
	h.events(prior + 1)
}

// A repeat of the same event is a count on one Event; its fields are the
// ones client-go's recorders write.
func TestRepeatIsACount(t *testing.T) {
	h := start(t, 0)
	for i := 0; i < 3; i++ {
		h.rec.Event(h.ref, corev1.EventTypeWarning, "SoftLockup", "CPU#3 stuck for 23s")
		h.clock.Step(time.Second)
	}
	evs := h.events(3)
	if len(evs) != 1 {
		t.Fatalf("want one Event, got %d: %+v", len(evs), evs)
	}
	e := evs[0]
	if e.Count != 3 || e.Type != corev1.EventTypeWarning || e.Reason != "SoftLockup" || e.Message != "CPU#3 stuck for 23s" ||
		e.Source.Component != "nodemend-agent" || e.Source.Host != h.node || e.ReportingController != "nodemend-agent" ||
		e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != h.node || e.Namespace != metav1.NamespaceDefault {
		t.Errorf("unexpected Event %+v", e)
	}
	if got := e.LastTimestamp.Sub(e.FirstTimestamp.Time); got != 2*time.Second {
		t.Errorf("last - first timestamp = %v, want 2s (the repeats' clock)", got)
	}
}

// Many different messages of one reason within the window become one
// combined Event; another reason is not affected.
func TestDifferentMessagesAreCombined(t *testing.T) {
	h := start(t, 0)
	for i := 0; i < CombineAfter+2; i++ {
		h.rec.Event(h.ref, corev1.EventTypeWarning, "NvidiaXID13Error", fmt.Sprintf("GPU %d: graphics engine exception", i))
	}
	h.rec.Event(h.ref, corev1.EventTypeWarning, "SoftLockup", "CPU#1 stuck")
	evs := h.events(CombineAfter + 3)
	var plain, combined []corev1.Event
	for _, e := range evs {
		switch {
		case e.Reason == "SoftLockup":
		case strings.HasPrefix(e.Message, CombinedPrefix):
			combined = append(combined, e)
		default:
			plain = append(plain, e)
		}
	}
	if len(plain) != CombineAfter-1 || len(combined) != 1 || combined[0].Count != 3 {
		t.Fatalf("want %d plain Events and one combined of count 3, got %d plain, combined %+v", CombineAfter-1, len(plain), combined)
	}
	if want := CombinedPrefix + fmt.Sprintf("GPU %d: graphics engine exception", CombineAfter+1); combined[0].Message != want {
		t.Errorf("combined message %q, want the latest one %q", combined[0].Message, want)
	}
	// After the window, messages stand alone again.
	h.clock.Step(CombineWindow + time.Second)
	h.rec.Event(h.ref, corev1.EventTypeWarning, "NvidiaXID13Error", "GPU 99: graphics engine exception")
	evs = h.events(CombineAfter + 4)
	if len(evs) != len(plain)+len(combined)+2 {
		t.Errorf("a message after the window was not a new Event: %d Events", len(evs))
	}
}

// Each reason on each object has its own token bucket: a storm of one
// reason is cut to the burst, refilled one per Refill, and another reason
// still gets through.
func TestStormIsRateLimitedPerReason(t *testing.T) {
	h := start(t, 3)
	for i := 0; i < 10; i++ {
		h.rec.Event(h.ref, corev1.EventTypeWarning, "Storm", "the same line")
	}
	h.rec.Event(h.ref, corev1.EventTypeWarning, "Other", "another fault")
	h.settle(3 + 1)
	evs := h.events(3 + 1 + 1)
	counts := map[string]int32{}
	for _, e := range evs {
		counts[e.Reason] += e.Count
	}
	if counts["Storm"] != 3 || counts["Other"] != 1 {
		t.Fatalf("want Storm 3 (the burst), Other 1; got %v", counts)
	}
	h.clock.Step(DefaultRefill)
	h.rec.Event(h.ref, corev1.EventTypeWarning, "Storm", "the same line")
	h.rec.Event(h.ref, corev1.EventTypeWarning, "Storm", "the same line")
	h.settle(3 + 1 + 1 + 1) // one token back: one more Storm write
}

// A repeat of an Event the API server no longer has (its TTL expired) is
// written as a new Event.
func TestRepeatOfAGoneEventCreatesIt(t *testing.T) {
	h := start(t, 0)
	h.rec.Event(h.ref, corev1.EventTypeWarning, "SoftLockup", "CPU#3 stuck")
	evs := h.events(1)
	if err := client.CoreV1().Events(evs[0].Namespace).Delete(context.Background(), evs[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Second)
	h.rec.Event(h.ref, corev1.EventTypeWarning, "SoftLockup", "CPU#3 stuck")
	evs = h.events(1)
	if len(evs) != 1 || evs[0].Count != 1 {
		t.Fatalf("want a new Event of count 1, got %+v", evs)
	}
}

// Event never blocks: with no writer, a full queue drops.
func TestEventNeverBlocks(t *testing.T) {
	rec := New(Options{Sink: sink, Log: testr.New(t)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < QueueLength+10; i++ {
			rec.Event(&corev1.ObjectReference{Kind: "Node", Name: "n"}, corev1.EventTypeNormal, "R", "m")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Event blocked on a full queue")
	}
	if len(rec.queue) != QueueLength {
		t.Errorf("queue holds %d, want %d", len(rec.queue), QueueLength)
	}
}
