package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The repair's marks on a Node. These strings are an interface: kubectl
// mend, dashboards, the chart's admission policies and people's scripts
// name them. docs/repair.md describes them.
const (
	// RepairStateAnnotation holds the RepairRecord, as JSON. Only
	// nodemend-controller writes it.
	RepairStateAnnotation = "nodemend.dev/repair-state"
	// RepairTaintKey marks a node under repair (NoSchedule; its value is
	// the triggering condition's type). Only nodemend-controller writes it,
	// in the same request as the record.
	RepairTaintKey = "nodemend.dev/repair"

	// The person's acts. A person, not the controller, sets these (the
	// chart's admission policies say who may); the controller reads them,
	// and removes the release and the repair-now request once it has acted
	// on them.

	// VetoAnnotation stops nodemend from starting or continuing a repair of
	// the node. Its value is the reason.
	VetoAnnotation = "nodemend.dev/do-not-repair"
	// ReleaseAnnotation returns a quarantined node to service. Its value
	// says who or why.
	ReleaseAnnotation = "nodemend.dev/release"
	// RepairNowAnnotation asks for the node's repair now, as if its
	// policy's toleration had passed (Cluster API's remediate-machine
	// annotation): through the gate and the ladder, and only on evidence —
	// a rule of the node's policy flags one of its conditions. Its value
	// says who or why.
	RepairNowAnnotation = "nodemend.dev/repair-now"
)

// RepairRecordVersion is the RepairRecord schema this release writes and
// reads. Fields are only ever added within a version; a change that would
// mislead an older reader gets a new version, which older readers refuse
// (the controller then leaves the node alone and says so).
const RepairRecordVersion = 1

// RepairPhase is the repair step a node is in.
type RepairPhase string

const (
	// RepairPhaseNone: no repair in progress.
	RepairPhaseNone RepairPhase = ""
	// RepairPhaseDraining: tainted, pods are being moved off.
	RepairPhaseDraining RepairPhase = "Draining"
	// RepairPhaseTerminating: handed to the backend; done when the node is
	// gone.
	RepairPhaseTerminating RepairPhase = "Terminating"
	// RepairPhaseRemediating: a reboot or reset is ordered, or the next
	// attempt is decided; waiting for it to be verified.
	RepairPhaseRemediating RepairPhase = "Remediating"
	// RepairPhaseQuarantined: cordoned and tainted for a person.
	RepairPhaseQuarantined RepairPhase = "Quarantined"
)

// RepairRecord is everything nodemend-controller remembers about a node's
// repair, kept on the Node in the RepairStateAnnotation so that a restarted
// controller or a new leader resumes exactly where the last one stopped. It
// is written in the same request as the repair taint, and read and written
// only through DecodeRepairRecord and Encode.
//
// The zero record (IsZero) is "nothing to remember": the annotation is then
// removed.
type RepairRecord struct {
	// Version is the schema version (RepairRecordVersion).
	Version int `json:"version"`
	// Phase is the repair step; empty when no repair runs (the record may
	// still hold UnhealthySince or a Ladder window).
	Phase RepairPhase `json:"phase,omitempty"`
	// UnhealthySince is, per condition type, since when the controller
	// counts the node as unhealthy: the start of each toleration. Whole
	// seconds.
	UnhealthySince map[corev1.NodeConditionType]metav1.Time `json:"unhealthySince,omitempty"`
	// Trigger is the condition that started the repair.
	Trigger *RepairTrigger `json:"trigger,omitempty"`
	// Policy is the NodeRepairPolicy in force when the repair started
	// ("default" for the built-in one).
	Policy string `json:"policy,omitempty"`
	// Started is when the node was tainted.
	Started metav1.Time `json:"started,omitzero"`
	// Drained is when the drain ended and the node was handed to its
	// backend (Replace).
	Drained metav1.Time `json:"drained,omitzero"`
	// Failed is when the repair was reported failed, so that it is
	// reported once.
	Failed metav1.Time `json:"failed,omitzero"`
	// Rung is the ladder attempt of the repair: its position and, once
	// ordered, its order.
	Rung *RungAttempt `json:"rung,omitempty"`
	// Ladder is kept after an attempt returned the node to service, until
	// its window ends: the same fault back within it continues the ladder.
	Ladder *LadderRecord `json:"ladder,omitempty"`
	// Quarantined is when the node was quarantined.
	Quarantined metav1.Time `json:"quarantined,omitzero"`
	// HealthySince is since when a quarantined node has been healthy; it is
	// released after its policy's quarantine.healthyFor.
	HealthySince metav1.Time `json:"healthySince,omitzero"`
	// Cordoned: nodemend cordoned the node (it was schedulable before), so
	// its return to service uncordons it. A person's cordon is left alone.
	Cordoned bool `json:"cordoned,omitempty"`
	// OutOfService is when nodemend put Kubernetes' out-of-service taint
	// (node.kubernetes.io/out-of-service) on the node: the ladder left it
	// out of service and its kubelet and agent were gone past the drain
	// deadline (pkg/repair/outofservice). The taint goes when the kubelet
	// is Ready again, or with the repair. Added in the same version: a
	// record without it never had the taint put by nodemend.
	OutOfService metav1.Time `json:"outOfService,omitzero"`
	// Target is the object the backend deletes to replace the node, set at
	// the hand-over (phase Terminating).
	Target *RepairTarget `json:"target,omitempty"`
	// RepairNow is the person's request (RepairNowAnnotation) that this
	// repair consumed.
	RepairNow *RepairNowRequest `json:"repairNow,omitempty"`
}

// RepairTrigger is a node condition as it triggered a repair.
//
// +kubebuilder:validation:XValidation:rule="size(self.type) > 0 && size(self.type) <= 316",message="type must be a condition type of 1 to 316 characters"
type RepairTrigger struct {
	// +required
	Type corev1.NodeConditionType `json:"type"`
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status corev1.ConditionStatus `json:"status"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// TriggerOf is the trigger form of a node condition.
func TriggerOf(c corev1.NodeCondition) RepairTrigger {
	return RepairTrigger{Type: c.Type, Status: c.Status, Reason: c.Reason}
}

// String is "Type=Status/Reason", for people (notes, logs, the CLI). Never
// parse it: read the fields.
func (t RepairTrigger) String() string {
	s := string(t.Type) + "=" + string(t.Status)
	if t.Reason != "" {
		s += "/" + t.Reason
	}
	return s
}

// RungPosition is where a repair decision stands on its ladder: the rung
// (from 0) and the attempt of that rung (from 1).
type RungPosition struct {
	Rung    int `json:"rung"`
	Attempt int `json:"attempt"`
}

// String is "rung 1, attempt 2", for notes.
func (p RungPosition) String() string { return fmt.Sprintf("rung %d, attempt %d", p.Rung+1, p.Attempt) }

// RungAttempt is the ladder rung attempt in progress on a node.
type RungAttempt struct {
	RungPosition `json:",inline"`
	// Action is the rung's.
	Action LadderAction `json:"action"`
	// Of is how many attempts the rung has.
	Of int `json:"of"`
	// Order is the NodeRemediation of this attempt (ResetAccelerator,
	// Reboot); its name is derived from the decision, so that it is created
	// once however often the controller restarts. Empty until ordered.
	Order string `json:"order,omitempty"`
	// BootID is the node's boot when the attempt was ordered.
	BootID string `json:"bootID,omitempty"`
	// Started is when the attempt was decided; it fails at Started+Timeout.
	Started metav1.Time `json:"started"`
	// Timeout is the rung's; zero for rungs without one (Replace,
	// Quarantine).
	Timeout metav1.Duration `json:"timeout,omitzero"`
	// Verified is when the controller first saw the new boot ID (Reboot).
	Verified metav1.Time `json:"verified,omitzero"`
}

// Deadline is when the attempt has failed if it has not succeeded.
func (a RungAttempt) Deadline() time.Time { return a.Started.Add(a.Timeout.Duration) }

// LadderRecord is what is kept after an attempt returned the node to
// service, until Until: the same condition unhealthy again before then
// continues the ladder after this position instead of starting over.
type LadderRecord struct {
	RungPosition `json:",inline"`
	Action       LadderAction             `json:"action"`
	Condition    corev1.NodeConditionType `json:"condition"`
	Returned     metav1.Time              `json:"returned"`
	Until        metav1.Time              `json:"until"`
}

// RepairTarget is the object whose deletion replaces a node. It is recorded
// before it is deleted, so that a new leader deletes the same object, and
// only once (the UID is the deletion's precondition).
type RepairTarget struct {
	Backend    string    `json:"backend"`
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid,omitempty"`
}

// String is "Kind namespace/name" or "Kind name".
func (t RepairTarget) String() string {
	if t.Namespace != "" {
		return t.Kind + " " + t.Namespace + "/" + t.Name
	}
	return t.Kind + " " + t.Name
}

// RepairNowRequest is a person's repair-now request as the repair that
// consumed it recorded it.
type RepairNowRequest struct {
	// Request is the annotation's value (who or why).
	Request string `json:"request,omitempty"`
	// At is when the controller acted on it.
	At metav1.Time `json:"at,omitzero"`
}

// InRepair reports whether a repair has started.
func (r RepairRecord) InRepair() bool { return r.Phase != RepairPhaseNone }

// IsZero reports whether r holds nothing to remember.
func (r RepairRecord) IsZero() bool {
	return r.Phase == RepairPhaseNone && len(r.UnhealthySince) == 0 && r.Trigger == nil && r.Policy == "" &&
		r.Started.IsZero() && r.Drained.IsZero() && r.Failed.IsZero() && r.Rung == nil && r.Ladder == nil &&
		r.Quarantined.IsZero() && r.HealthySince.IsZero() && !r.Cordoned && r.Target == nil && r.RepairNow == nil &&
		r.OutOfService.IsZero()
}

// Encode is the annotation form of r, with its version set; "" for the
// zero record (the annotation is removed).
func (r RepairRecord) Encode() string {
	if r.IsZero() {
		return ""
	}
	r.Version = RepairRecordVersion
	b, err := json.Marshal(r)
	if err != nil {
		// Strings, numbers and times only: a failure is a bug here.
		panic(fmt.Sprintf("encoding the repair record: %v", err))
	}
	return string(b)
}

// DecodeRepairRecord reads the annotation form; "" is the zero record. A
// record that does not hold together — an unknown version or phase, a
// malformed time or duration, a phase without what it needs — is an error:
// the controller reports it and leaves the node alone rather than guess.
func DecodeRepairRecord(s string) (RepairRecord, error) {
	if s == "" {
		return RepairRecord{}, nil
	}
	var r RepairRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return RepairRecord{}, fmt.Errorf("parsing %s: %w", RepairStateAnnotation, err)
	}
	if err := r.Validate(); err != nil {
		return RepairRecord{}, fmt.Errorf("%s: %w", RepairStateAnnotation, err)
	}
	return r, nil
}

// Validate reports what makes r unusable. Encode's output passes for every
// record the workflow builds; a record written by hand may not.
func (r RepairRecord) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if r.Version != RepairRecordVersion {
		bad("version %d: this release reads version %d", r.Version, RepairRecordVersion)
	}
	switch r.Phase {
	case RepairPhaseNone, RepairPhaseDraining, RepairPhaseTerminating, RepairPhaseRemediating, RepairPhaseQuarantined:
	default:
		bad("unknown phase %q", r.Phase)
	}
	if r.InRepair() {
		if r.Started.IsZero() {
			bad("phase %s without a start time", r.Phase)
		}
		if r.Trigger == nil || r.Trigger.Type == "" {
			bad("phase %s without a trigger", r.Phase)
		}
	}
	if !r.OutOfService.IsZero() && !r.InRepair() {
		bad("an out-of-service taint recorded without a repair")
	}
	if r.Phase == RepairPhaseRemediating && r.Rung == nil {
		bad("phase %s without a rung attempt", r.Phase)
	}
	if r.Phase == RepairPhaseTerminating && r.Target == nil {
		bad("phase %s without a target", r.Phase)
	}
	if a := r.Rung; a != nil {
		if !a.Action.Valid() || a.Attempt < 1 || a.Rung < 0 || a.Of < 0 || a.Started.IsZero() {
			bad("rung attempt %+v lacks its action, position or start", *a)
		}
		if a.Timeout.Duration < 0 {
			bad("rung attempt timeout %s is negative", a.Timeout.Duration)
		}
	}
	if l := r.Ladder; l != nil && (l.Condition == "" || l.Attempt < 1 || l.Rung < 0 || l.Until.IsZero()) {
		bad("ladder record %+v lacks its condition, position or window", *l)
	}
	if t := r.Target; t != nil && (t.Kind == "" || t.Name == "" || t.APIVersion == "") {
		bad("target %+v lacks apiVersion, kind or name", *t)
	}
	for k, v := range r.UnhealthySince {
		if k == "" || v.IsZero() {
			bad("unhealthySince %q: %v", k, v)
		}
	}
	return errors.Join(errs...)
}
