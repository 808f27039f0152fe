// Package history is the typed part of nodemend-controller's Events: the
// reasons it emits and the Record each Event carries in its
// nodemend.dev/repair-record annotation. kubectl mend timeline reads Records,
// never the Events' notes (which are for people and may be reworded), and so
// tells a repair's story for a node that is gone as well, whose annotations
// went with it. docs/repair-history.md is the reference; both sides import
// this package, so they cannot drift.
package history

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// Event reasons of the controller. Like the Node annotations, these strings
// are an interface: dashboards and alerts select on them.
const (
	Recovered     = "NodeRecovered"
	Blocked       = "NodeRepairBlocked"
	WouldStart    = "NodeRepairWouldStart"
	Started       = "NodeRepairStarted"
	DrainBlocked  = "NodeDrainBlocked"
	DrainForced   = "NodeDrainDeadlineExceeded"
	HandedOver    = "NodeRepairHandedOver"
	TargetDeleted = "NodeRepairTargetDeleted"
	Succeeded     = "NodeRepairSucceeded"
	Failed        = "NodeRepairFailed"
	InvalidState  = "NodeRepairStateInvalid"
	InvalidPolicy = "NodeRepairPolicyInvalid"

	// The ladder's rungs (docs/repair.md, The ladder).
	RemediationOrdered = "NodeRemediationOrdered"
	RebootVerified     = "NodeRebootVerified"
	RemediationFailed  = "NodeRemediationFailed"
	ReturnedToService  = "NodeReturnedToService"
	Quarantined        = "NodeQuarantined"
	QuarantineReleased = "NodeQuarantineReleased"
	// ReleaseWaiting: a person released a quarantined node whose fault is
	// still reported; it stays quarantined until its status is healthy.
	ReleaseWaiting = "NodeQuarantineReleaseWaiting"
	// OutOfService: a node left out of service whose kubelet and agent are
	// gone got Kubernetes' out-of-service taint, so that its pods and
	// volumes move; OutOfServiceLifted: its kubelet is back, the taint off.
	OutOfService       = "NodeOutOfService"
	OutOfServiceLifted = "NodeOutOfServiceLifted"

	// ScheduledDrain: a node whose cloud scheduled an event for it was
	// cordoned and is drained ahead of it (a policy's scheduledEvents
	// action Drain); ScheduledDrainEnded: the event is gone, the cordon
	// lifted.
	ScheduledDrain      = "NodeScheduledDrain"
	ScheduledDrainEnded = "NodeScheduledDrainEnded"

	// RepairNowRefused: a person's repair-now request was not carried out
	// (the node is healthy under its policy, or its policy only counts it)
	// and was removed.
	RepairNowRefused = "NodeRepairNowRefused"
)

// Annotation is the Event annotation that holds the Record as JSON.
const Annotation = "nodemend.dev/repair-record"

// Version is the Record schema this package writes and reads. Fields are
// only ever added; a change that would mislead an older reader gets a new
// version, which older readers show as a plain event.
const Version = 1

// Record is what an Event says about the repair, for tools. Which fields are
// set depends on the reason (docs/repair-history.md).
type Record struct {
	// V is the schema version (Version).
	V int `json:"v"`
	// Trigger is the condition that made the node unhealthy.
	Trigger *Condition `json:"trigger,omitempty"`
	// UnhealthySince is when the controller first counted the node as
	// unhealthy: the start of the toleration.
	UnhealthySince time.Time `json:"unhealthySince,omitzero"`
	// Toleration is how long the policy tolerates the trigger.
	Toleration metav1.Duration `json:"toleration,omitzero"`
	// Policy is the NodeRepairPolicy in force ("default" for the built-in one).
	Policy string `json:"policy,omitempty"`
	// Pool is where the safety gate counted the node.
	Pool *Pool `json:"pool,omitempty"`
	// Gate is the gate that blocked the repair: Veto, Pause, Pool or Zone.
	Gate string `json:"gate,omitempty"`
	// Drain is the drain's settings and, for drain events, its counts.
	Drain *Drain `json:"drain,omitempty"`
	// Target is the object whose deletion replaces the node.
	Target *Target `json:"target,omitempty"`
	// Took is how long the step took: the drain (HandedOver), the whole
	// repair from the first unhealthy moment (Succeeded).
	Took metav1.Duration `json:"took,omitzero"`
	// Rung is the ladder rung attempt the event is about.
	Rung *Rung `json:"rung,omitempty"`
	// RepairNow is the person's repair-now request that started the
	// repair (Started), or that was refused (RepairNowRefused).
	RepairNow *v1alpha1.RepairNowRequest `json:"repairNow,omitempty"`
}

// Rung is one attempt of a ladder rung.
type Rung struct {
	// Action is ResetAccelerator, Reboot, Replace or Quarantine.
	Action string `json:"action"`
	// Index is the rung's place in the ladder, from 1; Attempt of Of.
	Index   int `json:"index"`
	Attempt int `json:"attempt"`
	Of      int `json:"of"`
	// Order is the NodeRemediation of the attempt.
	Order string `json:"order,omitempty"`
	// BootID is the node's boot when the attempt was ordered, NewBootID
	// the one that verified a reboot.
	BootID    string `json:"bootID,omitempty"`
	NewBootID string `json:"newBootID,omitempty"`
}

// Condition is a node condition, as it triggered a repair: the type the
// Node's repair record keeps it in (Type, Status, Reason).
type Condition = v1alpha1.RepairTrigger

// Pool is a group of nodes of the safety gate: an engine's object (NodePool,
// MachineDeployment, MachineSet), a label value, or the cluster.
type Pool struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Label is the label key of a label pool (Kind "Label"); Name is its value.
	Label string `json:"label,omitempty"`
}

// Drain is the drain's settings and counts.
type Drain struct {
	Mode     string          `json:"mode,omitempty"`
	Deadline metav1.Duration `json:"deadline,omitzero"`
	// Evicted, Deleted and Refused count the pods of one drain pass: moved
	// through the Eviction API, deleted past the deadline, and evictions a
	// PodDisruptionBudget refused.
	Evicted int `json:"evicted,omitempty"`
	Deleted int `json:"deleted,omitempty"`
	Refused int `json:"refused,omitempty"`
}

// Target is the object a backend deletes to replace the node: the type the
// Node's repair record keeps it in (its uid too).
type Target = v1alpha1.RepairTarget

// Annotations are the Event annotations that carry r, with the version set.
func (r Record) Annotations() map[string]string {
	r.V = Version
	b, _ := json.Marshal(r) // strings, times and numbers: cannot fail
	return map[string]string{Annotation: string(b)}
}

// Read returns the Record in an Event's annotations. It reports false for an
// Event without one (written by an earlier version, or not by the
// controller), or with one it cannot read: such an Event is shown as it is,
// and nothing is concluded from it.
func Read(annotations map[string]string) (Record, bool) {
	v, ok := annotations[Annotation]
	if !ok {
		return Record{}, false
	}
	var r Record
	if err := json.Unmarshal([]byte(v), &r); err != nil || r.V != Version {
		return Record{}, false
	}
	return r, true
}
