// Package exporter publishes what the monitors found: Fatal faults as node
// conditions (patched on change, only nodemend's types), everything as
// aggregated Events on the Node.
package exporter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/internal/backoff"
	"nodemend.dev/nodemend/internal/coreclient"
	"nodemend.dev/nodemend/pkg/agent/metrics"
	"nodemend.dev/nodemend/pkg/health"
)

// Options configure an Exporter.
type Options struct {
	Client   *coreclient.Client
	NodeName string
	Clock    clock.WithTicker
	Recorder EventRecorder
	Metrics  *metrics.Agent
	Log      logr.Logger
	// Coalesce is how long a change waits for others before the write, so a
	// burst of detections becomes one patch. Default 5ms.
	Coalesce time.Duration
	// Heartbeat rewrites the conditions (LastHeartbeatTime) this often even
	// without change. Default 5m.
	Heartbeat time.Duration
	// WarningRenotify is how often a Warning that a check keeps finding is
	// reported again as an Event. Default 1h.
	WarningRenotify time.Duration
	// EarlierBoot says that the conditions on the node were written during
	// an earlier boot of the host: Start drops their log-derived faults
	// (pkg/agent/boot.go decides).
	EarlierBoot bool
}

// EventRecorder writes Events (pkg/agent/events).
type EventRecorder interface {
	Event(ref *corev1.ObjectReference, eventType, reason, message string)
}

// Exporter owns the node's nodemend conditions.
type Exporter struct {
	opts    Options
	nodeRef *corev1.ObjectReference

	mu      sync.Mutex
	book    *book
	written map[health.ConditionType]corev1.NodeCondition
	// present are condition types seen on the node that must be deleted when
	// their monitor is off.
	present map[health.ConditionType]bool
	// pending are source timestamps of detections not yet written, per type,
	// for the detection-to-write latency histogram.
	pending   map[health.ConditionType][]time.Time
	warned    map[faultKey]time.Time
	lastWrite time.Time
	dirty     chan struct{}
	started   bool
}

// New returns an Exporter; call Start before Run.
func New(opts Options) *Exporter {
	if opts.Coalesce <= 0 {
		opts.Coalesce = 5 * time.Millisecond
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = v1alpha1.DefaultAgentHeartbeat
	}
	if opts.WarningRenotify <= 0 {
		opts.WarningRenotify = time.Hour
	}
	return &Exporter{
		opts:    opts,
		nodeRef: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: opts.NodeName, UID: types.UID(opts.NodeName)},
		book:    newBook(),
		written: map[health.ConditionType]corev1.NodeCondition{},
		present: map[health.ConditionType]bool{},
		pending: map[health.ConditionType][]time.Time{},
		warned:  map[faultKey]time.Time{},
		dirty:   make(chan struct{}, 1),
	}
}

// NodeRef is the object events about this node refer to.
func (e *Exporter) NodeRef() *corev1.ObjectReference { return e.nodeRef }

// SetMonitors declares the monitors that run; the conditions of all other
// types are removed from the node.
func (e *Exporter) SetMonitors(ms []health.Monitor) {
	e.mu.Lock()
	e.book.setMonitors(ms)
	e.mu.Unlock()
	e.markDirty()
}

// SetCustomReasons declares the operator's reasons (the agent config's
// custom rules, checks and promotions), so that a fault of one found on
// the Node at start is adopted like a registry reason's. Call it before
// Start.
func (e *Exporter) SetCustomReasons(rs map[string]health.Reason) {
	e.mu.Lock()
	e.book.custom = rs
	e.mu.Unlock()
}

// Start reads the node and adopts the nodemend conditions on it, waiting
// until the node exists. Call SetMonitors first.
func (e *Exporter) Start(ctx context.Context) error {
	var node *corev1.Node
	retry := backoff.New(RetryInitial, RetryMax)
	for {
		var err error
		node, err = e.opts.Client.GetNode(ctx, e.opts.NodeName)
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) {
			e.opts.Log.Error(err, "reading node; retrying")
		}
		if !retry.Wait(ctx, e.opts.Clock) {
			return ctx.Err()
		}
	}
	now := e.opts.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nodeRef.UID = node.UID
	for _, c := range node.Status.Conditions {
		if !health.IsOwned(string(c.Type)) {
			continue
		}
		e.present[health.ConditionType(c.Type)] = true
		e.written[health.ConditionType(c.Type)] = c
		e.book.adopt(c, now, e.opts.EarlierBoot)
	}
	e.started = true
	e.markDirtyLocked()
	return nil
}

// Report publishes a log-derived detection.
func (e *Exporter) Report(d Detection) {
	e.opts.Metrics.Detection(d.Reason.Name, string(d.Reason.Severity))
	e.event(d)
	e.mu.Lock()
	now := e.opts.Clock.Now()
	if e.book.observe(d, now) {
		e.pending[d.Reason.Condition] = append(e.pending[d.Reason.Condition], d.Finding.Observed)
		e.markDirtyLocked()
	}
	e.mu.Unlock()
}

// ReportCheck publishes the result of a periodic check: ds are all faults it
// sees now among reasons; the other reasons have recovered.
func (e *Exporter) ReportCheck(reasons []string, ds []Detection) {
	now := e.opts.Clock.Now()
	var toEvent []Detection
	e.mu.Lock()
	seen := map[faultKey]bool{}
	for _, d := range ds {
		k := faultKey{d.Reason.Name, d.Finding.Subject}
		seen[k] = true
		// A check keeps seeing a standing fault; report it again only rarely.
		if last, ok := e.warned[k]; !ok || now.Sub(last) >= e.opts.WarningRenotify {
			e.warned[k] = now
			toEvent = append(toEvent, d)
		}
	}
	owned := map[string]bool{}
	for _, r := range reasons {
		owned[r] = true
	}
	for k := range e.warned {
		if owned[k.reason] && !seen[k] {
			delete(e.warned, k)
		}
	}
	if e.book.checkResult(reasons, ds, now) {
		for _, d := range ds {
			e.pending[d.Reason.Condition] = append(e.pending[d.Reason.Condition], d.Finding.Observed)
		}
		e.markDirtyLocked()
	}
	e.mu.Unlock()
	for _, d := range toEvent {
		e.opts.Metrics.Detection(d.Reason.Name, string(d.Reason.Severity))
		e.event(d)
	}
}

func (e *Exporter) event(d Detection) {
	if e.opts.Recorder == nil {
		return
	}
	typ := corev1.EventTypeWarning
	if d.Reason.Severity == health.Info {
		typ = corev1.EventTypeNormal
	}
	e.opts.Recorder.Event(e.nodeRef, typ, d.Reason.Name, health.BoundMessage(d.Finding.Message))
}

func (e *Exporter) markDirty() {
	e.mu.Lock()
	e.markDirtyLocked()
	e.mu.Unlock()
}

func (e *Exporter) markDirtyLocked() {
	select {
	case e.dirty <- struct{}{}:
	default:
	}
}

// Retries of a failed status write (and of the first read of the node):
// 200 ms doubling to 4 s, each delay up to 20% longer at random
// (internal/backoff), so at most MaxWritesPerMinute attempts a minute
// while the API server is unreachable, and the latest state is written at
// most 4.8 s after it is back. The agent's clients also wait behind one
// apigate.Gate (4 s ceiling too): its probes and these retries together
// keep that bound.
const (
	RetryInitial = 200 * time.Millisecond
	RetryMax     = 4 * time.Second
)

// MaxWritesPerMinute bounds the status writes during an outage (19).
var MaxWritesPerMinute = backoff.MaxAttempts(RetryInitial, RetryMax, time.Minute)

// Run writes conditions on change, on quiet-period expiry and on heartbeat,
// until ctx ends. After a failed write it waits out its backoff, whatever
// changes meanwhile: the next attempt writes the state of that moment.
func (e *Exporter) Run(ctx context.Context) error {
	retry := backoff.New(RetryInitial, RetryMax)
	var retryAt time.Time // zero: the last write succeeded
	for {
		wake := e.opts.Heartbeat
		e.mu.Lock()
		now := e.opts.Clock.Now()
		if next := e.book.expire(now); !next.IsZero() && next.Sub(now) < wake {
			wake = next.Sub(now)
		}
		if hb := e.lastWrite.Add(e.opts.Heartbeat).Sub(now); hb < wake {
			wake = hb
		}
		e.mu.Unlock()
		if !retryAt.IsZero() {
			wake = retryAt.Sub(now)
		}
		timer := e.opts.Clock.NewTimer(max(wake, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-e.dirty:
			timer.Stop()
			if !retryAt.IsZero() && e.opts.Clock.Now().Before(retryAt) {
				continue // the retry will carry this change
			}
			// Coalesce a burst of changes into one write.
			select {
			case <-ctx.Done():
				return nil
			case <-e.opts.Clock.After(e.opts.Coalesce):
			}
		case <-timer.C():
		}
		if err := e.sync(ctx); err != nil {
			delay := retry.Next()
			e.opts.Log.Error(err, "writing node conditions; will retry", "in", delay.Round(time.Millisecond))
			e.opts.Metrics.StatusWrite(false)
			retryAt = e.opts.Clock.Now().Add(delay)
			continue
		}
		retry.Reset()
		retryAt = time.Time{}
	}
}

// sync patches the node when the desired conditions differ from what was
// written, or the heartbeat is due.
func (e *Exporter) sync(ctx context.Context) error {
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return nil
	}
	now := e.opts.Clock.Now()
	e.book.expire(now)
	conds, removed := e.book.desired(now)
	heartbeat := now.Sub(e.lastWrite) >= e.opts.Heartbeat
	var patchConds []any
	changedTypes := map[health.ConditionType]bool{}
	for _, c := range conds {
		t := health.ConditionType(c.Type)
		old, ok := e.written[t]
		if ok && !heartbeat && sameCondition(old, c) {
			continue
		}
		c.LastHeartbeatTime = metav1Time(now)
		patchConds = append(patchConds, c)
		changedTypes[t] = true
	}
	var deleted []health.ConditionType
	for _, t := range removed {
		if _, ok := e.written[t]; ok || e.present[t] {
			patchConds = append(patchConds, map[string]any{"type": string(t), "$patch": "delete"})
			deleted = append(deleted, t)
		}
	}
	pending := e.pending
	e.pending = map[health.ConditionType][]time.Time{}
	e.mu.Unlock()

	if len(patchConds) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": patchConds}})
	if err != nil {
		return err
	}
	_, err = e.opts.Client.PatchNodeStatus(ctx, e.opts.NodeName, types.StrategicMergePatchType, patch, "nodemend-agent")

	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		// Keep the latencies for the write that succeeds. Run retries
		// after its backoff; what was not written stays different from
		// e.written, so the retry sends it.
		for t, ts := range pending {
			e.pending[t] = append(ts, e.pending[t]...)
		}
		return fmt.Errorf("patching status of node %s: %w", e.opts.NodeName, err)
	}
	written := e.opts.Clock.Now()
	e.lastWrite = now
	for _, c := range patchConds {
		if nc, ok := c.(corev1.NodeCondition); ok {
			e.written[health.ConditionType(nc.Type)] = nc
			e.opts.Metrics.ConditionStatus(string(nc.Type), string(nc.Status))
		}
	}
	for _, t := range deleted {
		delete(e.written, t)
		delete(e.present, t)
		e.opts.Metrics.ConditionRemoved(string(t))
	}
	for t, ts := range pending {
		if !changedTypes[t] {
			continue
		}
		for _, observed := range ts {
			if !observed.IsZero() {
				e.opts.Metrics.DetectionToWrite(string(t), written.Sub(observed))
			}
		}
	}
	e.opts.Metrics.StatusWrite(true)
	return nil
}

func sameCondition(a, b corev1.NodeCondition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

func metav1Time(t time.Time) metav1.Time {
	// The API server stores seconds; compare like with like.
	return metav1.NewTime(t.Truncate(time.Second))
}
