package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The next reconcile a node needs is a time on the controller's clock: a
// toleration's end, a drain's next pass or its deadline, a blocked
// repair's recheck, an attempt's timeout. A step says so with wakeAt
// during the node's reconcile; Reconcile returns the earliest such time as
// RequeueAfter, which controller-runtime's queue waits out (on the clock of
// the queue Options.NewQueue builds, real time by default). Reconciles are
// level-based: each says again what it needs, and one that comes early (an
// event, an earlier requeue still waiting) decides again and changes
// nothing that is not due.

type wakeupKey struct{}

// wakeup is the earliest time the node being reconciled asked for.
type wakeup struct {
	at  time.Time
	set bool
}

func withWakeup(ctx context.Context) (context.Context, *wakeup) {
	w := &wakeup{}
	return context.WithValue(ctx, wakeupKey{}, w), w
}

// wakeAt asks for the next reconcile of the node being reconciled at t, or
// earlier if another step asked for an earlier time.
func wakeAt(ctx context.Context, t time.Time) {
	if w, ok := ctx.Value(wakeupKey{}).(*wakeup); ok && (!w.set || t.Before(w.at)) {
		w.at, w.set = t, true
	}
}

// noWake withdraws what this reconcile asked for: the node needs nothing
// until it changes (it is healthy, or only counted).
func noWake(ctx context.Context) {
	if w, ok := ctx.Value(wakeupKey{}).(*wakeup); ok {
		*w = wakeup{}
	}
}

// result is Reconcile's result for a node that asked for w.
func (r *Reconciler) result(node string, w *wakeup) reconcile.Result {
	if !w.set {
		return reconcile.Result{}
	}
	if d := w.at.Sub(r.opts.Clock.Now()); d > 0 {
		return reconcile.Result{RequeueAfter: d}
	}
	// Due now: queued at once, behind the nodes already queued (a node
	// being reconciled is queued again when its reconcile ends).
	r.enqueue(node)
	return reconcile.Result{}
}

// startQueue keeps the controller's work queue, for the nodes woken from
// another node's reconcile: a freed drain slot's next node, the breaker's
// heads. It runs when the controller starts (this replica leads).
func (r *Reconciler) startQueue(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.queue.Store(&q)
	return nil
}

// enqueue queues node's reconcile now; nothing before the controller runs.
func (r *Reconciler) enqueue(node string) {
	if q := r.queue.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
	}
}
