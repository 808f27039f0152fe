package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/reference"

	"nodemend.dev/nodemend/api/v1alpha1"
	"nodemend.dev/nodemend/pkg/health"
	"nodemend.dev/nodemend/pkg/repair/backend"
	"nodemend.dev/nodemend/pkg/repair/drainpass"
	"nodemend.dev/nodemend/pkg/repair/gate"
	"nodemend.dev/nodemend/pkg/repair/history"
	"nodemend.dev/nodemend/pkg/repair/ladder"
	"nodemend.dev/nodemend/pkg/repair/outofservice"
	"nodemend.dev/nodemend/pkg/repair/policy"
	"nodemend.dev/nodemend/pkg/repair/pool"
	"nodemend.dev/nodemend/pkg/repair/record"
	"nodemend.dev/nodemend/pkg/repair/unhealthy"
	"nodemend.dev/nodemend/pkg/rungs"
)

// Every Event the controller emits is built here: its reason, action and
// note (for people), the history.Record it carries (for kubectl mend
// timeline and other tools, docs/repair-history.md), and, for the events
// that a re-check would repeat, the key under which it is emitted once.

// event is one Event to emit.
type event struct {
	regarding runtime.Object
	// related is the other object the event is about (the target a backend
	// deletes), nil when none.
	related   runtime.Object
	eventType string
	reason    string
	action    string
	note      string
	record    history.Record
	// once, when set, emits the event only the first time for its subject
	// and key (see dedupe).
	once *onceKey
}

type onceKey struct{ subject, key string }

// emit records ev, unless it is a repeat; it reports whether it emitted,
// so that the caller logs and counts a state once too.
func (r *Reconciler) emit(ev event) bool {
	if !r.due(ev) {
		return false
	}
	r.send(ev)
	return true
}

// emitWithNextStep holds ev, a decision's own event, until the node's next
// reconcile (sendHeld), which is queued behind the decisions already due:
// the drain that follows a decision is that reconcile. In a storm a
// thousand decisions would otherwise each send an Event the API server
// writes to etcd beside the decisions' taints, slowing them by a quarter
// (docs/performance.md); with nothing else queued, the next reconcile
// follows at once. Held events are memory only, as the event recorder's
// own queue is.
func (r *Reconciler) emitWithNextStep(node string, ev event) {
	r.held.mu.Lock()
	defer r.held.mu.Unlock()
	if r.held.byNode == nil {
		r.held.byNode = map[string][]event{}
	}
	r.held.byNode[node] = append(r.held.byNode[node], ev)
}

// sendHeld emits the events held for node, oldest first.
func (r *Reconciler) sendHeld(node string) {
	r.held.mu.Lock()
	evs := r.held.byNode[node]
	delete(r.held.byNode, node)
	r.held.mu.Unlock()
	for _, ev := range evs {
		r.emit(ev)
	}
}

// heldEvents are the events held until their node's next reconcile.
type heldEvents struct {
	mu     sync.Mutex
	byNode map[string][]event
}

// due reports whether ev is not a repeat, and remembers it as reported.
func (r *Reconciler) due(ev event) bool {
	return ev.once == nil || r.dedupe.first(ev.once.subject, ev.reason, ev.once.key)
}

// send records ev as an events.k8s.io Event with its record annotated. The
// note is bounded: the API server refuses an Event whose note is over 1 kB,
// and notes quote error messages and policies.
func (r *Reconciler) send(ev event) {
	note := health.BoundMessage(ev.note)
	if (ev.reason == history.Blocked || ev.reason == history.InvalidPolicy) && r.events != nil {
		r.sendOwn(ev, note)
		return
	}
	r.recorder.AnnotatedEventf(ev.regarding, ev.related, ev.record.Annotations(), ev.eventType, ev.reason, ev.action, "%s", note)
}

// sendOwn creates ev as an Event of its own, beside the events library
// (client-go tools/events), which folds an event into the series of an
// earlier one with the same type, reason, action and objects for six
// minutes whatever its note says: a node blocked by its pool and then by the
// pause kept only the pool's message, and a policy's problem that changed
// with the agents' configuration kept only the first. A blocked state and
// a policy's problem are each emitted once (dedupe), so each one is worth
// its own Event. It is written as the
// library writes (reported by nodemend-repair from this host, in the
// default namespace for a cluster-scoped object), in the background with
// the manager's clients, which hold it through an API outage.
func (r *Reconciler) sendOwn(ev event, note string) {
	ref, err := reference.GetReference(r.client.Scheme(), ev.regarding)
	if err != nil {
		r.recorder.AnnotatedEventf(ev.regarding, ev.related, ev.record.Annotations(), ev.eventType, ev.reason, ev.action, "%s", note)
		return
	}
	now := r.opts.Clock.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()+int64(r.sentOwn.Add(1))), Namespace: ns,
			Annotations: ev.record.Annotations()},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: Name,
		ReportingInstance:   r.instance,
		Action:              ev.action,
		Reason:              ev.reason,
		Regarding:           *ref,
		Note:                note,
		Type:                ev.eventType,
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := r.events.Events(ns).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			r.log.Error(err, "could not write event", "reason", ev.reason, "regarding", ref.Name)
		}
	}()
}

// dedupe remembers, per subject (a node's name, "policy/NAME", "pool/KEY")
// and event reason, the key of the state last reported: an event is emitted
// once per state, not on every re-check. It is memory only: a new leader
// reports each state once more.
type dedupe struct {
	mu   sync.Mutex
	seen map[string]map[string]string
}

// first reports whether (reason, key) is new for subject, and remembers it.
func (d *dedupe) first(subject, reason, key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[string]map[string]string{}
	}
	m := d.seen[subject]
	if m == nil {
		m = map[string]string{}
		d.seen[subject] = m
	}
	if old, ok := m[reason]; ok && old == key {
		return false
	}
	m[reason] = key
	return true
}

// forget drops what was reported for subject: for the given reasons, or
// everything when none are given.
func (d *dedupe) forget(subject string, reasons ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(reasons) == 0 {
		delete(d.seen, subject)
		return
	}
	for _, reason := range reasons {
		delete(d.seen[subject], reason)
	}
}

// keyActionNone dedups the log line of a node whose policy's action is None
// (no event: the node is only counted).
const keyActionNone = "action-none"

// keyDrainWait dedups the log line of a tainted node waiting for its drain
// turn (no event: a storm would write one per waiting node).
const keyDrainWait = "drain-wait"

// poolSubject is the dedupe subject of a pool object's events.
func poolSubject(where string) string { return "pool/" + where }

func triggerOf(c corev1.NodeCondition) *history.Condition {
	t := v1alpha1.TriggerOf(c)
	return &t
}

func poolOf(p pool.Pool) *history.Pool {
	return &history.Pool{Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, Label: p.Label}
}

func targetOf(t backend.Target) *history.Target { return &t }

// relatedOf is the target as an object reference for the Event's related
// field; nil when the target is the node itself.
func relatedOf(t backend.Target) runtime.Object {
	if t.Kind == "Node" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: t.APIVersion, Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, UID: t.UID}
}

// what says what triggered a repair, for notes: "<Type=Status/Reason> since
// <RFC 3339> (toleration <d>, policy <p>)".
func what(trigger unhealthy.Finding, pol policy.Policy) string {
	return fmt.Sprintf("%s since %s (toleration %s, policy %s)", v1alpha1.TriggerOf(trigger.Condition),
		trigger.Since.UTC().Format(time.RFC3339), trigger.Rule.Toleration, pol.Name)
}

func startRecord(trigger unhealthy.Finding, pol policy.Policy, g group) history.Record {
	return history.Record{
		Trigger: triggerOf(trigger.Condition), UnhealthySince: trigger.Since,
		Toleration: metav1.Duration{Duration: trigger.Rule.Toleration}, Policy: pol.Name, Pool: poolOf(g.pool),
		Drain: &history.Drain{Mode: string(pol.Drain.Mode), Deadline: metav1.Duration{Duration: pol.Drain.Deadline}},
	}
}

// invalidStateEvent: the node's repair annotations cannot be read; once per
// problem.
func invalidStateEvent(node *corev1.Node, err error) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.InvalidState, action: "Inspect",
		note: fmt.Sprintf("%s; nodemend leaves this node alone until its %s annotation is fixed or removed", err, record.StateAnnotation),
		once: &onceKey{node.Name, err.Error()}}
}

// recoveredEvent: the node was healthy again before its toleration passed.
func recoveredEvent(node *corev1.Node, since unhealthy.Since) event {
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.Recovered, action: "Tolerate",
		note:   "conditions healthy again before the toleration passed; repair clock reset",
		record: history.Record{UnhealthySince: since.Earliest()}}
}

// wouldStartEvent: in dry run, the repair that would start now; once per
// unhealthy period.
func wouldStartEvent(node *corev1.Node, trigger unhealthy.Finding, pol policy.Policy, g group, d gate.Decision) event {
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.WouldStart, action: "DryRun",
		note:   fmt.Sprintf("dry run: would taint, drain and replace this node: %s; %s", what(trigger, pol), d.Message),
		record: startRecord(trigger, pol, g), once: &onceKey{node.Name, trigger.Since.String()}}
}

// startedEvent: the node is tainted and its drain begins, for the rung of
// attempt.
func startedEvent(node *corev1.Node, trigger unhealthy.Finding, pol policy.Policy, g group, d gate.Decision, a ladder.Attempt, rungs int, request *v1alpha1.RepairNowRequest) event {
	rec := startRecord(trigger, pol, g)
	rec.Rung = rungOf(a, "", "")
	rec.RepairNow = request
	asked := ""
	if request != nil {
		asked = fmt.Sprintf(" (repair requested now: %s %q)", record.RepairNowAnnotation, request.Request)
	}
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.Started, action: "Taint",
		note: fmt.Sprintf("%s%s: tainted %s:NoSchedule; drain %s, deadline %s; then %s; %s",
			what(trigger, pol), asked, record.TaintKey, pol.Drain.Mode, pol.Drain.Deadline, rungNote(a, rungs), d.Message),
		record: rec}
}

// repairNowRefusedEvent: a person's repair-now request was consumed
// without a repair.
func repairNowRefusedEvent(node *corev1.Node, request, why string) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.RepairNowRefused, action: "Gate",
		note:   fmt.Sprintf("repair-now request %q not carried out and removed: %s", request, why),
		record: history.Record{RepairNow: &v1alpha1.RepairNowRequest{Request: request}}}
}

func rungOf(a ladder.Attempt, order, newBoot string) *history.Rung {
	if order == "" {
		order = a.Order
	}
	return &history.Rung{Action: string(a.Action), Index: a.Rung + 1, Attempt: a.Attempt, Of: a.Of, Order: order,
		BootID: a.BootID, NewBootID: newBoot}
}

// rungNote is "Reboot (rung 1 of 2, attempt 1 of 1)".
func rungNote(a ladder.Attempt, rungs int) string {
	return fmt.Sprintf("%s (rung %d of %d, attempt %d of %d)", a.Action, a.Rung+1, rungs, a.Attempt, max(a.Of, 1))
}

// orderedEvent: a NodeRemediation was created for the node's agent.
func orderedEvent(node *corev1.Node, a ladder.Attempt, o *v1alpha1.NodeRemediation) event {
	return event{regarding: node, related: &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRemediation", Name: o.Name, UID: o.UID},
		eventType: corev1.EventTypeNormal, reason: history.RemediationOrdered, action: "Remediate",
		note: fmt.Sprintf("ordered %s from the node's agent (NodeRemediation %s, boot %s, to be started within %ds); verified by %s within %s",
			a.Action, o.Name, a.BootID, o.Spec.ActiveDeadlineSeconds, verifiedBy(a.Action), a.Timeout.Duration),
		record: history.Record{Rung: rungOf(a, o.Name, "")}}
}

// verifiedBy is what proves an attempt of a, as the rung table says.
func verifiedBy(a v1alpha1.LadderAction) string {
	rung, _ := rungs.Lookup(a)
	return rung.VerifiedBy
}

// rebootVerifiedEvent: the Node's boot ID changed.
func rebootVerifiedEvent(node *corev1.Node, a ladder.Attempt, newBoot string, rungs int) event {
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.RebootVerified, action: "Remediate",
		note:   fmt.Sprintf("%s: the node rebooted (boot %s, now %s); waiting for the condition to be healthy", rungNote(a, rungs), a.BootID, newBoot),
		record: history.Record{Rung: rungOf(a, "", newBoot)}}
}

// remediationFailedEvent: an attempt failed; the ladder goes on with next.
func remediationFailedEvent(node *corev1.Node, failed, next ladder.Attempt, why string, rungs int) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.RemediationFailed, action: "Remediate",
		note:   fmt.Sprintf("%s failed: %s; next: %s", rungNote(failed, rungs), why, rungNote(next, rungs)),
		record: history.Record{Rung: rungOf(failed, "", "")}}
}

// rungsSkippedEvent: the node's agent is silent, so the rungs it carries
// out were skipped. Its own action (Skip), so that the events library does
// not fold it into an earlier failure's series.
func rungsSkippedEvent(node *corev1.Node, skipped, next ladder.Attempt, msg string, rungs int) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.RemediationFailed, action: "Skip",
		note:   fmt.Sprintf("%s: %s; next: %s", rungNote(skipped, rungs), msg, rungNote(next, rungs)),
		record: history.Record{Rung: rungOf(skipped, "", "")}}
}

// outOfServiceEvent: the out-of-service taint put on a dead node left out
// of service, or taken off a node whose kubelet is back.
func outOfServiceEvent(node *corev1.Node, added bool, why string) event {
	if added {
		return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.OutOfService, action: "OutOfService",
			note: "tainted " + outofservice.TaintKey + "=" + outofservice.TaintValue + ":NoExecute: " + why}
	}
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.OutOfServiceLifted, action: "OutOfService",
		note: outofservice.TaintKey + " taken off: " + why}
}

// returnedEvent: an attempt was verified; the node is back in service.
func returnedEvent(node *corev1.Node, st record.State, a ladder.Attempt, how string, rec *ladder.Record, rungs int) event {
	c := repairTrigger(st)
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.ReturnedToService, action: "Repair",
		note: fmt.Sprintf("%s: %s; untainted and back in service. %s unhealthy again before %s continues the ladder",
			rungNote(a, rungs), how, c.Type, rec.Until.UTC().Format(time.RFC3339)),
		record: history.Record{Trigger: &c, Policy: st.Policy, Rung: rungOf(a, "", "")}}
}

// quarantinedEvent: the node is cordoned and tainted for a person.
func quarantinedEvent(node *corev1.Node, st record.State, a ladder.Attempt) event {
	c := repairTrigger(st)
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.Quarantined, action: "Quarantine",
		note: fmt.Sprintf("quarantined for a person after %s: cordoned and tainted %s; release with kubectl mend release %s (annotation %s)",
			c, record.TaintKey, node.Name, record.ReleaseAnnotation),
		record: history.Record{Trigger: &c, Policy: st.Policy, Rung: rungOf(a, "", "")}}
}

// releasedEvent: a quarantined node is back in service.
func releasedEvent(node *corev1.Node, st record.State, why string) event {
	c := repairTrigger(st)
	return event{regarding: node, eventType: corev1.EventTypeNormal, reason: history.QuarantineReleased, action: "Quarantine",
		note:   fmt.Sprintf("quarantine %s: untainted, uncordoned where nodemend had cordoned, back in service", why),
		record: history.Record{Trigger: &c, Policy: st.Policy}}
}

// releaseWaitingEvent: a person released a quarantined node whose fault
// is still reported; once per request.
func releaseWaitingEvent(node *corev1.Node, who string) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.ReleaseWaiting, action: "Quarantine",
		note: fmt.Sprintf("release by %s waits: a condition of the node is still unhealthy under its policy; "+
			"it returns to service once its status shows no fault", who),
		once: &onceKey{node.Name, who}}
}

// blockedEvent: a gate holds the node's repair; once per gate (and pool or
// zone) until the node passes or leaves.
func blockedEvent(regarding runtime.Object, subject, key string, d gate.Decision, recheck time.Duration, g *group) event {
	rec := history.Record{Gate: string(d.Gate)}
	if g != nil && (d.Gate == gate.Pool || d.Gate == gate.Zone) {
		rec.Pool = poolOf(g.pool)
	}
	// The breaker's hold is its own action, so that tools tell it from
	// the pool's "over" it follows (each blocked state is an Event of
	// its own: send).
	action := "Gate"
	if d.Gate == gate.Metered {
		action = "Meter"
	}
	return event{regarding: regarding, eventType: corev1.EventTypeWarning, reason: history.Blocked, action: action,
		note: fmt.Sprintf("%s; re-checking every %s", d.Message, recheck), record: rec, once: &onceKey{subject, key}}
}

// drainForcedEvent: the drain deadline passed and pods were deleted
// without PodDisruptionBudgets; once per repair.
func drainForcedEvent(node *corev1.Node, pol policy.Policy, res drainpass.DrainResult) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.DrainForced, action: "Drain",
		note: fmt.Sprintf("drain deadline %s passed: deleted %d remaining pods without honouring PodDisruptionBudgets", pol.Drain.Deadline, res.Deleted),
		record: history.Record{Drain: &history.Drain{Mode: string(pol.Drain.Mode), Deadline: metav1.Duration{Duration: pol.Drain.Deadline},
			Evicted: res.Evicted, Deleted: res.Deleted, Refused: res.Blocked}},
		once: &onceKey{node.Name, ""}}
}

// drainBlockedEvent: PodDisruptionBudgets refused evictions; once per
// repair.
func drainBlockedEvent(node *corev1.Node, pol policy.Policy, res drainpass.DrainResult, deadline time.Time) event {
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.DrainBlocked, action: "Drain",
		note: fmt.Sprintf("%d evictions refused by PodDisruptionBudgets (%s); retrying until the deadline %s",
			res.Blocked, res.Message, deadline.UTC().Format(time.RFC3339)),
		record: history.Record{Drain: &history.Drain{Mode: string(pol.Drain.Mode), Deadline: metav1.Duration{Duration: pol.Drain.Deadline},
			Evicted: res.Evicted, Deleted: res.Deleted, Refused: res.Blocked}},
		once: &onceKey{node.Name, ""}}
}

// handedOverEvent: the node is drained and handed to its backend.
func handedOverEvent(node *corev1.Node, backendName string, target backend.Target, drained time.Duration) event {
	took := drained.Round(time.Second)
	return event{regarding: node, related: relatedOf(target), eventType: corev1.EventTypeNormal, reason: history.HandedOver, action: "Drain",
		note:   fmt.Sprintf("drained in %s; handing the node to the %s backend: deleting %s", took, backendName, target),
		record: history.Record{Target: targetOf(target), Took: metav1.Duration{Duration: drained}}}
}

// targetDeletedEvent: the backend's object was deleted.
func targetDeletedEvent(node *corev1.Node, target backend.Target) event {
	return event{regarding: node, related: relatedOf(target), eventType: corev1.EventTypeNormal, reason: history.TargetDeleted, action: "Delete",
		note:   fmt.Sprintf("deleted %s; the repair is done when the node object is gone", target),
		record: history.Record{Target: targetOf(target)}}
}

// failedEvent: the repair cannot go on or did not finish (recorded once on
// the node, so not deduplicated here).
func failedEvent(node *corev1.Node, st record.State, msg string) event {
	rec := history.Record{Policy: st.Policy, Trigger: st.Trigger}
	if st.Target != nil {
		rec.Target = targetOf(*st.Target)
	}
	return event{regarding: node, eventType: corev1.EventTypeWarning, reason: history.Failed, action: "Repair", note: msg, record: rec}
}

// succeededEvent: the node under repair is gone. It is emitted on a
// reference, the Node object being deleted.
func succeededEvent(name string, inf inflight, took time.Duration) event {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: inf.uid}
	c := inf.trigger
	return event{regarding: ref, eventType: corev1.EventTypeNormal, reason: history.Succeeded, action: "Repair",
		note:   fmt.Sprintf("node gone %s after it became unhealthy (%s)", took.Round(time.Second), c.Type),
		record: history.Record{Trigger: &c, UnhealthySince: inf.since, Took: metav1.Duration{Duration: took}}}
}

// invalidPolicyEvent: a NodeRepairPolicy has problems; once per policy
// generation and problem.
func invalidPolicyEvent(o *v1alpha1.NodeRepairPolicy, msg string) event {
	return event{regarding: o, eventType: corev1.EventTypeWarning, reason: history.InvalidPolicy, action: "Validate", note: msg,
		record: history.Record{Policy: o.Name}, once: &onceKey{"policy/" + o.Name, fmt.Sprintf("%d/%s", o.Generation, msg)}}
}
