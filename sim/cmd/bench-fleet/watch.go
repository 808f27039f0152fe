package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/internal/coreclient"
)

// stormWatch is filled by informers: when each sick node was decided
// (tainted by nodemend, or its NodeClaim marked for deletion by
// Karpenter) and deleted, and what went wrong on the way.
type stormWatch struct {
	mu      sync.Mutex
	sick    map[string]bool
	decided map[string]time.Time
	deleted map[string]time.Time
	// notReadySeen are the sick nodes seen Ready=False; one seen Ready
	// again before its decision means kwok still acts as its kubelet.
	notReadySeen map[string]bool
	revived      []string
	// remarked counts, per node, the times a revived node was marked
	// Ready=False again (keepDown).
	remarked map[string]int
	// healthyDeleted are deleted nodes the storm left healthy.
	healthyDeleted []string
}

func newStormWatch(sick []string) *stormWatch {
	w := &stormWatch{sick: map[string]bool{}, decided: map[string]time.Time{}, deleted: map[string]time.Time{}, notReadySeen: map[string]bool{}, remarked: map[string]int{}}
	for _, n := range sick {
		w.sick[n] = true
	}
	return w
}

func (w *stormWatch) decide(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.decided[node]; !ok && w.sick[node] {
		w.decided[node] = time.Now()
	}
}

// watchNodes records deletions, Ready going back to True on a sick node,
// and, when byTaint, a decision when a sick node's repair taint appears.
func (w *stormWatch) watchNodes(ctx context.Context, cs kubernetes.Interface, byTaint bool) error {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = benchLabel + "=true"
	}))
	inf := f.Core().V1().Nodes().Informer()
	seen := func(o any) {
		n, ok := o.(*corev1.Node)
		if !ok || !w.sick[n.Name] {
			return
		}
		if byTaint && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taintKey }) {
			w.decide(n.Name)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch ready := nodeReady(n); {
		case ready == corev1.ConditionFalse:
			w.notReadySeen[n.Name] = true
		case ready == corev1.ConditionTrue && w.notReadySeen[n.Name] && w.decided[n.Name].IsZero():
			w.revived = append(w.revived, n.Name)
			delete(w.notReadySeen, n.Name)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, o any) { seen(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			n, ok := o.(*corev1.Node)
			if !ok {
				return
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.sick[n.Name] {
				w.deleted[n.Name] = time.Now()
			} else {
				w.healthyDeleted = append(w.healthyDeleted, n.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	return nil
}

// waitAll waits until every sick node is deleted, or deadline: what is not
// done by then is reported as not reached.
func (w *stormWatch) waitAll(ctx context.Context, deadline time.Time) {
	last := -1
	_ = wait.PollUntilContextCancel(ctx, time.Second, false, func(context.Context) (bool, error) {
		w.mu.Lock()
		decided, deleted := len(w.decided), len(w.deleted)
		w.mu.Unlock()
		if deleted+decided != last && decided > 0 {
			say("  %d/%d decided, %d/%d repaired", decided, len(w.sick), deleted, len(w.sick))
			last = deleted + decided
		}
		if time.Now().After(deadline) {
			say("  deadline %s: %d of %d unhealthy nodes repaired", deadline.Format(time.TimeOnly), deleted, len(w.sick))
			return true, nil
		}
		return deleted == len(w.sick), nil
	})
}

// failures is what makes the run's figures meaningless.
func (w *stormWatch) failures() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for n, times := range w.remarked {
		if times > maxRemarks {
			errs = append(errs, fmt.Errorf("sick node %s turned Ready again %d times before its repair (kwok still acts on it)", n, times))
			break
		}
	}
	if len(w.healthyDeleted) > 0 {
		errs = append(errs, fmt.Errorf("%d nodes the storm left healthy were deleted, e.g. %s", len(w.healthyDeleted), w.healthyDeleted[0]))
	}
	return errors.Join(errs...)
}

// maxRemarks is how often a sick node may turn Ready again before the run
// is void: once or twice is a heartbeat kwok had in flight when the node's
// heartbeats were stopped; more means kwok still acts as its kubelet.
const maxRemarks = 2

// keepDown marks Ready=False again, dated ltt, on every sick node that turned
// Ready before its repair, as a dead kubelet's node would stay, until ctx
// ends. Kwok may have had a heartbeat in flight when the node's heartbeat
// was stopped; the transition time is unchanged, so no toleration restarts.
func (w *stormWatch) keepDown(ctx context.Context, cs kubernetes.Interface, ltt time.Time) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		w.mu.Lock()
		revived := w.revived
		w.revived = nil
		for _, n := range revived {
			w.remarked[n]++
		}
		w.mu.Unlock()
		if len(revived) == 0 {
			return
		}
		say("  %d sick nodes turned Ready again (a heartbeat in flight); marked Ready=False again", len(revived))
		if err := markNotReady(ctx, cs, revived, ltt); err != nil && ctx.Err() == nil {
			say("  marking Ready=False again: %v", err)
		}
	}, time.Second)
}

// results are latencies from the tolerations' end, sorted; a node not
// decided or not deleted by the deadline has none.
type results struct {
	due       int
	latencies []time.Duration // toleration end → decision seen
	completed []time.Duration // toleration end → node deleted
	allDone   time.Duration   // toleration end → last node deleted (when all were)
	undecided int             // deleted without a decision seen
	remarked  int             // sick nodes marked Ready=False again (keepDown)
}

func (w *stormWatch) results(due time.Time) results {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := results{due: len(w.sick), remarked: len(w.remarked)}
	for n := range w.sick {
		if t, ok := w.decided[n]; ok {
			r.latencies = append(r.latencies, t.Sub(due))
		}
		if t, ok := w.deleted[n]; ok {
			d := t.Sub(due)
			r.completed = append(r.completed, d)
			r.allDone = max(r.allDone, d)
			if _, ok := w.decided[n]; !ok {
				r.undecided++
			}
		}
	}
	slices.Sort(r.latencies)
	slices.Sort(r.completed)
	return r
}

// pct is the p-quantile of the total nodes of which sorted reached the
// point, and false when that quantile did not reach it.
func pct(sorted []time.Duration, total int, p float64) (time.Duration, bool) {
	if total == 0 {
		return 0, false
	}
	i := int(p * float64(total-1))
	if i >= len(sorted) {
		return 0, false
	}
	return sorted[i], true
}

// cheapWatch is cfg asking for protobuf without gzip: the API server encodes
// each event once per format for all its watchers and compresses it again
// for each watcher that accepts gzip.
func cheapWatch(cfg *rest.Config) *rest.Config {
	cfg = coreclient.Protobuf(cfg)
	cfg.DisableCompression = true
	return cfg
}
