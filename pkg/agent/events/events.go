// Package events writes nodemend-agent's core/v1 Events: a repeat of the
// same event becomes a count on one Event, many different messages of one
// reason are combined, and each reason of each object is rate-limited, so
// that a storm of one fault costs the API server a handful of writes.
//
// It does what client-go's tools/record correlator does for the agent, in
// the agent: tools/record builds its repeat patches with the strategic merge
// patch machinery, which links the OpenAPI models (kube-openapi, gnostic)
// into the binary — several MB on every node for a count and a timestamp
// (docs/agent.md#footprint). A repeat here is a JSON merge patch.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"nodemend.dev/nodemend/internal/backoff"
)

// Sink writes Events (nodemend's core/v1 client).
type Sink interface {
	CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	PatchEvent(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) (*corev1.Event, error)
}

// The defaults are client-go's recorder's, so that Events look and pace
// the same as before (and as the kubelet's).
const (
	// DefaultBurst events of one reason on one object go out at once ...
	DefaultBurst = 25
	// ... and then one per DefaultRefill.
	DefaultRefill = 5 * time.Minute
	// CombineAfter different messages of one reason within CombineWindow
	// are written as one Event with a combined message.
	CombineAfter  = 10
	CombineWindow = 10 * time.Minute
	// CombinedPrefix starts the message of a combined Event.
	CombinedPrefix = "(combined from similar events): "
	// QueueLength is how many events wait for the writer; more are
	// dropped (an API outage must not grow the agent's memory).
	QueueLength = 1000
	// cacheEntries bounds each of the caches (series, limiters, messages).
	cacheEntries = 4096
	// attempts is how often one write is tried.
	attempts = 12
)

// Options configure a Recorder.
type Options struct {
	Sink Sink
	// Source names the writer (component and host) on every Event.
	Source corev1.EventSource
	Clock  clock.WithTicker
	Log    logr.Logger
	// Burst and Refill override DefaultBurst and DefaultRefill (tests).
	Burst  int
	Refill time.Duration
	// RetryInitial and RetryMax pace a failed write (default 1s and 10s).
	RetryInitial, RetryMax time.Duration
}

// Recorder queues Events and writes them in order from Run.
type Recorder struct {
	opts  Options
	queue chan pending
	// The caches are used only by Run's goroutine.
	series   *lru.Cache // seriesKey → *series
	limiters *lru.Cache // limitKey → *rate.Limiter
	similar  *lru.Cache // limitKey → *messages
	// written numbers the Events created, so that two of one instant
	// (a coarse or fake clock) get different names.
	written uint64
}

type pending struct {
	ref                  corev1.ObjectReference
	typ, reason, message string
	at                   time.Time
}

// New returns a Recorder; Event may be called before Run starts.
func New(opts Options) *Recorder {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Refill <= 0 {
		opts.Refill = DefaultRefill
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 10 * time.Second
	}
	return &Recorder{
		opts:     opts,
		queue:    make(chan pending, QueueLength),
		series:   lru.New(cacheEntries),
		limiters: lru.New(cacheEntries),
		similar:  lru.New(cacheEntries),
	}
}

// Event queues an Event about ref; it never blocks (a full queue drops it).
func (r *Recorder) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	select {
	case r.queue <- pending{ref: *ref, typ: eventType, reason: reason, message: message, at: r.opts.Clock.Now()}:
	default:
		r.opts.Log.Info("event queue full; dropping event", "reason", reason)
	}
}

// Run writes queued Events until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.queue:
			r.write(ctx, p)
		}
	}
}

// series is one Event written and how often it was seen.
type series struct {
	namespace, name string
	count           int32
}

// messages are the distinct messages of one reason on one object within
// the current window.
type messages struct {
	since time.Time
	seen  map[string]bool
}

func (r *Recorder) write(ctx context.Context, p pending) {
	limitKey := p.ref.Kind + "/" + p.ref.Namespace + "/" + p.ref.Name + "/" + p.typ + "/" + p.reason
	if !r.allow(limitKey, p.at) {
		return
	}
	msg, combined := r.combine(limitKey, p.message, p.at)
	key := limitKey + "\x00" + msg
	if combined {
		// The combined Event is one series; each repeat carries the latest
		// message.
		key = limitKey + "\x00combined"
	}
	if s, ok := r.series.Get(key); ok {
		s := s.(*series)
		patch, _ := json.Marshal(map[string]any{"count": s.count + 1, "lastTimestamp": metav1.NewTime(p.at), "message": msg})
		err := r.retry(ctx, func() error {
			_, err := r.opts.Sink.PatchEvent(ctx, s.namespace, s.name, types.MergePatchType, patch)
			return err
		})
		if err == nil {
			s.count++
			return
		}
		if !apierrors.IsNotFound(err) {
			r.opts.Log.Error(err, "could not update event", "reason", p.reason)
			return
		}
		// The Event expired (the API server's event TTL): start anew.
		r.series.Remove(key)
	}
	r.written++
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// The name is fixed before the first attempt: a retry of a
			// create that got through finds it (AlreadyExists).
			Name:      fmt.Sprintf("%v.%x.%x", p.ref.Name, p.at.UnixNano(), r.written),
			Namespace: p.ref.Namespace,
		},
		InvolvedObject:      p.ref,
		Reason:              p.reason,
		Message:             msg,
		FirstTimestamp:      metav1.NewTime(p.at),
		LastTimestamp:       metav1.NewTime(p.at),
		Count:               1,
		Type:                p.typ,
		Source:              r.opts.Source,
		ReportingController: r.opts.Source.Component,
		ReportingInstance:   r.opts.Source.Host,
	}
	if ev.Namespace == "" {
		// Events about cluster-scoped objects live in the default namespace,
		// as client-go's recorders put them (the agent's RBAC allows that).
		ev.Namespace = metav1.NamespaceDefault
	}
	err := r.retry(ctx, func() error {
		_, err := r.opts.Sink.CreateEvent(ctx, ev)
		if apierrors.IsAlreadyExists(err) {
			return nil // an earlier attempt got through
		}
		return err
	})
	if err != nil {
		r.opts.Log.Error(err, "could not write event", "reason", p.reason)
		return
	}
	r.series.Add(key, &series{namespace: ev.Namespace, name: ev.Name, count: 1})
}

// allow takes a token of key's bucket.
func (r *Recorder) allow(key string, at time.Time) bool {
	l, ok := r.limiters.Get(key)
	if !ok {
		l = rate.NewLimiter(rate.Every(r.opts.Refill), r.opts.Burst)
		r.limiters.Add(key, l)
	}
	return l.(*rate.Limiter).AllowN(at, 1)
}

// combine returns the message to write: msg itself, or once CombineAfter
// different messages of key came within CombineWindow, the combined one.
func (r *Recorder) combine(key, msg string, at time.Time) (string, bool) {
	v, ok := r.similar.Get(key)
	m, _ := v.(*messages)
	if !ok || at.Sub(m.since) > CombineWindow {
		m = &messages{since: at, seen: map[string]bool{}}
		r.similar.Add(key, m)
	}
	if len(m.seen) < CombineAfter {
		m.seen[msg] = true
	}
	if len(m.seen) >= CombineAfter {
		return CombinedPrefix + msg, true
	}
	return msg, false
}

// retry runs write until it succeeds, fails for good (a client error) or
// ctx ends.
func (r *Recorder) retry(ctx context.Context, write func() error) error {
	delays := backoff.New(r.opts.RetryInitial, r.opts.RetryMax)
	var err error
	for i := 0; i < attempts; i++ {
		if err = write(); err == nil || !retriable(err) {
			return err
		}
		if !delays.Wait(ctx, r.opts.Clock) {
			return ctx.Err()
		}
	}
	return err
}

// retriable: the API server may accept the same write later (it was
// unreachable, busy or timed out), unlike a refusal of the write itself.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // transport error
	}
	code := status.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}
