// Package drainpass is one pass of a repair's drain: which of a node's pods
// to evict or delete (PlanDrain, pure) and the pass that does it through the
// Eviction API (Drainer), so that PodDisruptionBudgets hold until the
// drain's deadline.
package drainpass

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// DrainPlan is what one drain pass does.
type DrainPlan struct {
	Evict  []corev1.Pod
	Delete []corev1.Pod
	// Terminating counts pods already asked to leave (deletion timestamp
	// set) that still exist.
	Terminating int
	// Done: nothing left to do; the node can be handed to its backend.
	Done bool
}

// PlanDrain decides one pass over the pods that must leave a node (DaemonSet
// and mirror pods already excluded). Before the deadline pods are evicted
// (Evict) or deleted (Delete); after it, the rest are deleted. The drain is
// done when every pod has been asked to leave and either all are gone, the
// deadline has passed, or the kubelet is not reporting (it would never
// confirm a graceful termination, so waiting is pointless).
func PlanDrain(pods []corev1.Pod, mode v1alpha1.DrainMode, pastDeadline, kubeletAlive bool) DrainPlan {
	var p DrainPlan
	if mode == v1alpha1.DrainSkip {
		p.Done = true
		return p
	}
	for _, pod := range pods {
		switch {
		case pod.DeletionTimestamp != nil:
			p.Terminating++
		case mode == v1alpha1.DrainDelete || pastDeadline:
			p.Delete = append(p.Delete, pod)
		default:
			p.Evict = append(p.Evict, pod)
		}
	}
	p.Done = len(p.Evict) == 0 && len(p.Delete) == 0 && (p.Terminating == 0 || pastDeadline || !kubeletAlive)
	return p
}

// DrainResult reports one pass.
type DrainResult struct {
	Evicted, Deleted int
	// Blocked counts evictions refused by a PodDisruptionBudget; Message is
	// the last refusal.
	Blocked     int
	Message     string
	Terminating int
	Done        bool
}

// Drainer runs drain passes with kubectl's drain library: its pod filters
// (DaemonSet and mirror pods stay; pods with emptyDir and unmanaged pods go,
// since the node is being replaced; pods that tolerate the repair taint by
// its key stay, see StaysThroughRepair) and its eviction and deletion calls. Its
// waiting loops are not used: a pass never blocks, the reconciler comes back
// on its own clock, and the deadline is checked against that clock.
type Drainer struct {
	Client kubernetes.Interface
}

// StaysThroughRepair reports a pod that tolerates the repair taint by its
// key (nodemend.dev/repair): it is not drained and leaves with the node
// after the hand-over to the backend. nodemend-controller's own replicas
// tolerate it (the chart's default): a controller that evicted itself from
// the node it repairs — every replica, where they share that node — would
// leave the repair stalled mid-drain with nobody to finish it. A wildcard
// toleration (operator Exists without a key) does not count: it says
// nothing about repairs.
func StaysThroughRepair(p *corev1.Pod) bool {
	for _, t := range p.Spec.Tolerations {
		if t.Key == v1alpha1.RepairTaintKey && (t.Operator == corev1.TolerationOpExists || t.Operator == "" || t.Operator == corev1.TolerationOpEqual) {
			return true
		}
	}
	return false
}

// Pass lists the node's pods, evicts or deletes as PlanDrain says, and
// reports. Errors other than PDB refusals are returned after the pass.
func (d Drainer) Pass(ctx context.Context, nodeName string, mode v1alpha1.DrainMode, pastDeadline, kubeletAlive bool) (DrainResult, error) {
	if mode == v1alpha1.DrainSkip {
		return DrainResult{Done: true}, nil
	}
	h := &drain.Helper{
		Ctx:                 ctx,
		Client:              d.Client,
		Force:               true,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		GracePeriodSeconds:  -1, // the pod's own grace period
		AdditionalFilters: []drain.PodFilter{func(p corev1.Pod) drain.PodDeleteStatus {
			if StaysThroughRepair(&p) {
				return drain.MakePodDeleteStatusSkip()
			}
			return drain.MakePodDeleteStatusOkay()
		}},
		Out:    io.Discard,
		ErrOut: io.Discard,
	}
	list, errs := h.GetPodsForDeletion(nodeName)
	if len(errs) > 0 {
		return DrainResult{}, fmt.Errorf("listing pods of node %s: %w", nodeName, errors.Join(errs...))
	}
	plan := PlanDrain(list.Pods(), mode, pastDeadline, kubeletAlive)
	res := DrainResult{Terminating: plan.Terminating, Done: plan.Done}
	var failed []error
	for _, pod := range plan.Evict {
		if err := ctx.Err(); err != nil {
			return res, err // stopping: the HTTP/2 transport would still send
		}
		err := h.EvictPod(pod, policyv1.SchemeGroupVersion)
		switch {
		case err == nil:
			res.Evicted++
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget says no (or is not yet computed):
			// retried on the next pass until the deadline.
			res.Blocked++
			res.Message = fmt.Sprintf("evicting %s/%s: %v", pod.Namespace, pod.Name, err)
		default:
			failed = append(failed, fmt.Errorf("evicting %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	for _, pod := range plan.Delete {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		err := h.DeletePod(pod)
		switch {
		case err == nil:
			res.Deleted++
		case apierrors.IsNotFound(err):
		default:
			failed = append(failed, fmt.Errorf("deleting %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	// Every pod was just asked to leave: if the next pass would not wait
	// for them anyway (deadline passed, or no kubelet to confirm), the
	// drain is done now, without another list.
	if !res.Done && len(failed) == 0 && res.Blocked == 0 && (pastDeadline || !kubeletAlive) {
		res.Done = true
	}
	return res, errors.Join(failed...)
}
