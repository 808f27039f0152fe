package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"nodemend.dev/nodemend/pkg/repair/record"
)

// Milestone is a step of a node's repair, observed from the API.
type Milestone string

// The steps of a repair, in the order they happen.
const (
	FaultWritten       Milestone = "fault written to the node's kernel log"
	ConditionFalse     Milestone = "condition False at the API server"
	Tainted            Milestone = "node tainted nodemend.dev/repair (toleration over)"
	PodsEvicted        Milestone = "workload pods evicted (PDB respected)"
	HandedOver         Milestone = "drained, handed to Karpenter"
	NodeClaimDeleted   Milestone = "NodeClaim deleting"
	ReplacementCreated Milestone = "replacement node created by Karpenter"
	ReplacementReady   Milestone = "replacement node Ready"
	PodsRunning        Milestone = "all workload pods Running elsewhere"
	NodeGone           Milestone = "sick node deleted"
)

// RepairMilestones are the steps of a successful repair.
var RepairMilestones = []Milestone{FaultWritten, ConditionFalse, Tainted, PodsEvicted, HandedOver, NodeClaimDeleted,
	ReplacementCreated, ReplacementReady, PodsRunning, NodeGone}

// Journey records when each milestone of one node's repair was first seen.
// Watches (not polling) feed it, so its times are within a watch event's
// delivery of the change.
type Journey struct {
	Node      string
	Condition corev1.NodeConditionType

	mu          sync.Mutex
	at          map[Milestone]time.Time
	changed     chan struct{}
	pool        string
	known       map[string]bool // nodes that existed when the watch started
	replacement string
	replicas    int
	selector    labels.Selector
	namespace   string
	onNode      map[string]string // workload pod → node
	podsReady   map[string]bool
	hadPods     bool
	listeners   []func(Milestone, time.Time)
	pending     []Step // reached, listeners not yet told
}

// WatchRepair starts recording the repair of node for condition, with
// the workload (namespace, label selector, replica count) whose pods must
// end up running elsewhere. Call before injecting the fault.
func (s *Sim) WatchRepair(ctx context.Context, node string, condition corev1.NodeConditionType, namespace, selector string, replicas int) (*Journey, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, err
	}
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	j := &Journey{Node: node, Condition: condition, at: map[Milestone]time.Time{}, changed: make(chan struct{}),
		pool: n.Labels["karpenter.sh/nodepool"], known: map[string]bool{}, replicas: replicas, selector: sel,
		namespace: namespace, onNode: map[string]string{}, podsReady: map[string]bool{}}
	nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes.Items {
		j.known[n.Name] = true
	}

	factory := informers.NewSharedInformerFactory(s.Client, 0)
	nodeInf := factory.Core().V1().Nodes().Informer()
	podInf := informers.NewSharedInformerFactoryWithOptions(s.Client, 0, informers.WithNamespace(namespace)).Core().V1().Pods().Informer()
	claimInf := dynamicinformer.NewDynamicSharedInformerFactory(s.Dynamic, 0).ForResource(NodeClaimGVR).Informer()
	handler := func(f func(o any, deleted bool)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { f(o, false) },
			UpdateFunc: func(_, o any) { f(o, false) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				f(o, true)
			},
		}
	}
	for _, x := range []struct {
		inf cache.SharedIndexInformer
		f   func(any, bool)
	}{{nodeInf, j.onNodeEvent}, {podInf, j.onPodEvent}, {claimInf, j.onClaimEvent}} {
		if _, err := x.inf.AddEventHandler(handler(x.f)); err != nil {
			return nil, err
		}
		go x.inf.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, podInf.HasSynced, claimInf.HasSynced) {
		return nil, ctx.Err()
	}
	return j, nil
}

// OnMilestone calls f (from a watch goroutine) for every milestone as it
// is reached, e.g. to print a live timeline.
func (j *Journey) OnMilestone(f func(Milestone, time.Time)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.listeners = append(j.listeners, f)
}

// Mark records a milestone observed outside the watches (the fault write).
func (j *Journey) Mark(m Milestone, t time.Time) {
	j.mu.Lock()
	defer j.unlockAndNotify()
	j.markLocked(m, t)
}

// unlockAndNotify releases the lock, then tells the listeners about the
// milestones reached meanwhile (a listener may call At or Durations).
func (j *Journey) unlockAndNotify() {
	pending, listeners := j.pending, j.listeners
	j.pending = nil
	j.mu.Unlock()
	for _, st := range pending {
		for _, f := range listeners {
			f(st.Milestone, st.At)
		}
	}
}

func (j *Journey) markLocked(m Milestone, t time.Time) {
	if _, ok := j.at[m]; ok {
		return
	}
	j.at[m] = t
	j.pending = append(j.pending, Step{Milestone: m, At: t})
	close(j.changed)
	j.changed = make(chan struct{})
}

// At returns when m was reached.
func (j *Journey) At(m Milestone) (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	t, ok := j.at[m]
	return t, ok
}

// Replacement is the node Karpenter launched after the repair began.
func (j *Journey) Replacement() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.replacement
}

// Wait blocks until m is reached.
func (j *Journey) Wait(ctx context.Context, m Milestone) (time.Time, error) {
	for {
		j.mu.Lock()
		t, ok := j.at[m]
		ch := j.changed
		j.mu.Unlock()
		if ok {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("node %s: waiting for %q: %w", j.Node, m, ctx.Err())
		case <-ch:
		}
	}
}

func (j *Journey) onNodeEvent(o any, deleted bool) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	j.mu.Lock()
	defer j.unlockAndNotify()
	if n.Name == j.Node {
		if deleted {
			j.markLocked(NodeGone, now)
			return
		}
		for _, c := range n.Status.Conditions {
			if c.Type == j.Condition && c.Status == corev1.ConditionFalse {
				j.markLocked(ConditionFalse, now)
			}
		}
		if record.HasTaint(n) {
			j.markLocked(Tainted, now)
		}
		if record.HasTaint(n) && record.PhaseOf(n) == record.PhaseTerminating {
			j.markLocked(HandedOver, now)
		}
		return
	}
	if deleted || j.known[n.Name] || n.Labels["karpenter.sh/nodepool"] != j.pool {
		return
	}
	if _, tainted := j.at[Tainted]; !tainted {
		return // a node launched before the repair began is not its replacement
	}
	if j.replacement == "" {
		j.replacement = n.Name
		j.markLocked(ReplacementCreated, now)
	}
	if n.Name == j.replacement && nodeReady(n) {
		j.markLocked(ReplacementReady, now)
	}
}

func (j *Journey) onPodEvent(o any, deleted bool) {
	p, ok := o.(*corev1.Pod)
	if !ok || !j.selector.Matches(labels.Set(p.Labels)) {
		return
	}
	now := time.Now()
	j.mu.Lock()
	defer j.unlockAndNotify()
	if deleted || p.DeletionTimestamp != nil {
		delete(j.onNode, p.Name)
		delete(j.podsReady, p.Name)
	} else {
		j.onNode[p.Name] = p.Spec.NodeName
		j.podsReady[p.Name] = podReady(p)
	}
	onSick := 0
	for _, node := range j.onNode {
		if node == j.Node {
			onSick++
		}
	}
	if onSick > 0 {
		j.hadPods = true
	}
	if _, tainted := j.at[Tainted]; tainted && j.hadPods && onSick == 0 {
		j.markLocked(PodsEvicted, now)
	}
	if _, evicted := j.at[PodsEvicted]; !evicted {
		return
	}
	ready := 0
	for name, ok := range j.podsReady {
		if ok && j.onNode[name] != j.Node {
			ready++
		}
	}
	if ready >= j.replicas {
		j.markLocked(PodsRunning, now)
	}
}

func (j *Journey) onClaimEvent(o any, deleted bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
	if node != j.Node {
		return
	}
	if deleted || u.GetDeletionTimestamp() != nil {
		j.mu.Lock()
		j.markLocked(NodeClaimDeleted, time.Now())
		j.unlockAndNotify()
	}
}

// Durations are the time from each reached milestone to the next one, in
// RepairMilestones order.
func (j *Journey) Durations() []Step {
	j.mu.Lock()
	defer j.mu.Unlock()
	var steps []Step
	start := j.at[FaultWritten]
	for _, m := range RepairMilestones {
		if t, ok := j.at[m]; ok {
			steps = append(steps, Step{Milestone: m, At: t, SinceFault: t.Sub(start)})
		}
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return a.At.Compare(b.At) })
	for i := 1; i < len(steps); i++ {
		steps[i].SincePrevious = steps[i].At.Sub(steps[i-1].At)
	}
	return steps
}

// Step is one reached milestone with its timing.
type Step struct {
	Milestone     Milestone
	At            time.Time
	SinceFault    time.Duration
	SincePrevious time.Duration
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
